#!/usr/bin/env bash
# The runner's unit tests (tests/unit) under each other CPython of 3.10-3.13 this machine has (pyenv's
# versions, else pythonX.Y on PATH), each in a virtual environment of its own, build/py-matrix/X.Y, made
# with `pip install -e .[test]` and remade when pyproject.toml changes. The environments are made one
# after the other (an editable install writes into the checkout); the interpreters' test runs then go
# side by side, each with its own pytest folder, and their output is printed in order. `make test` runs
# it after the whole suite under .venv's Python; under CI=true a missing interpreter fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# builds the stacks: the run under .venv's Python has it
DESELECT=tests/unit/test_containers.py::test_installed_local_stack_has_the_versions_of_its_lock

interpreter() {  # the path of CPython $1 (X.Y), or nothing
    local found
    for found in "$(pyenv root 2>/dev/null)"/versions/"$1".*/bin/python"$1" "$(command -v "python$1" || true)"; do
        if [ -x "$found" ] && "$found" -c 'import sys' 2>/dev/null; then echo "$found"; return; fi
    done
}

prepare() {  # the environment of CPython $1 at $2
    local venv="build/py-matrix/$1"
    if [ ! -f "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ]; then
        "$2" -m venv --clear "$venv"
        "$venv/bin/pip" install --quiet -e '.[test]'
        touch "$venv/.installed"
    fi
}

unit_tests() {  # tests/unit under the environment of CPython $1, in a pytest folder of its own
    local started=$SECONDS temp
    temp="$(mktemp -d "/tmp/hpcdl-matrix-$1-XXXXXX")"
    echo "python-matrix: CPython $1: tests/unit"
    "build/py-matrix/$1/bin/python" -m pytest -q -p no:cacheprovider --basetemp "$temp/t" tests/unit \
        --deselect "$DESELECT" && status=0 || status=$?
    rm -rf "$temp"
    echo "python-matrix: CPython $1 done in $((SECONDS - started)) s"
    return "$status"
}

here="$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
missing=() versions=()
for version in 3.10 3.11 3.12 3.13; do
    [ "$version" = "$here" ] && continue
    python="$(interpreter "$version")"
    if [ -z "$python" ]; then missing+=("$version"); continue; fi
    started=$SECONDS
    prepare "$version" "$python"
    echo "python-matrix: CPython $version ($python): environment ready in $((SECONDS - started)) s"
    versions+=("$version")
done

pids=()
trap '[ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true' EXIT
for version in "${versions[@]}"; do
    unit_tests "$version" > "build/py-matrix/$version.log" 2>&1 &
    pids+=("$!")
done
failed=()
for i in "${!versions[@]}"; do
    wait "${pids[$i]}" || failed+=("${versions[$i]}")
    cat "build/py-matrix/${versions[$i]}.log"
done
pids=()
if [ ${#failed[@]} -gt 0 ]; then
    echo "python-matrix: tests/unit failed under CPython ${failed[*]}"
    exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "python-matrix: no CPython ${missing[*]} on this machine: the unit tests did not run under it"
    [ "${CI:-}" != "true" ] || exit 1
fi
