#!/usr/bin/env bash
# The runner's unit tests (tests/unit) under each other CPython of 3.10-3.13 this machine has (pyenv's
# versions, else pythonX.Y on PATH), each in a virtual environment of its own, build/py-matrix/X.Y, made
# with `pip install -e .[test]` and remade when pyproject.toml changes. `make test` runs it after the
# whole suite under .venv's Python; under CI=true a missing interpreter fails the run.
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

here="$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
missing=()
for version in 3.10 3.11 3.12 3.13; do
    [ "$version" = "$here" ] && continue
    python="$(interpreter "$version")"
    if [ -z "$python" ]; then missing+=("$version"); continue; fi
    venv="build/py-matrix/$version"
    started=$SECONDS
    if [ ! -f "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ]; then
        "$python" -m venv --clear "$venv"
        "$venv/bin/pip" install --quiet -e '.[test]'
        touch "$venv/.installed"
    fi
    echo "python-matrix: CPython $version ($python): tests/unit"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit --deselect "$DESELECT"
    echo "python-matrix: CPython $version done in $((SECONDS - started)) s"
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "python-matrix: no CPython ${missing[*]} on this machine: the unit tests did not run under it"
    [ "${CI:-}" != "true" ] || exit 1
fi
