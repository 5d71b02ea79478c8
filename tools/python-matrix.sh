#!/usr/bin/env bash
# The runner's unit tests (tests/unit) under each other CPython of 3.10-3.13 this machine has (pyenv's
# versions, else pythonX.Y on PATH).
#   tools/python-matrix.sh              those runs, side by side; their output in order
#   tools/python-matrix.sh COMMAND ...  the same runs beside COMMAND (make test: pytest under .venv's Python),
#                                       at a lower priority; after COMMAND, a line per interpreter (its whole
#                                       log where it failed); exits non-zero where either failed. Ctrl-C and
#                                       SIGTERM alike reach COMMAND as one Ctrl-C (pytest then tears its fixtures
#                                       and daemons down) and end the matrix.
#   PYTHON_MATRIX="3.10 3.13" ...       only these versions (default: 3.10 3.11 3.12 3.13 but .venv's own)
# Each interpreter has a virtual environment of the runner's dependencies (pyproject.toml's, with [test]) kept
# in the XDG cache under a name made of pyproject.toml's hash and the interpreter's version: a fresh clone
# reuses it until either changes. The checkout itself is not installed there: the tests import it through
# PYTHONPATH, so the environment writes nothing into the checkout and never holds a stale copy of it.
# Beside COMMAND because the integration tests mostly wait (containers, job steps, ssh) on a two-core
# machine: the unit tests use the cores they leave idle. Under CI=true a missing interpreter fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# builds the stacks: the run under .venv's Python has it
DESELECT=tests/unit/test_containers.py::test_installed_local_stack_has_the_versions_of_its_lock
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/hpc-dl-bench/py-matrix"
LOGS=build/py-matrix

interpreter() {  # the path of CPython $1 (X.Y), or nothing
    local found
    for found in "$(pyenv root 2>/dev/null)"/versions/"$1".*/bin/python"$1" "$(command -v "python$1" || true)"; do
        if [ -x "$found" ] && "$found" -c 'import sys' 2>/dev/null; then echo "$found"; return; fi
    done
}

requirements() {  # the runner's dependencies and its [test] extra, one per line, from pyproject.toml
    .venv/bin/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))'
}

venv_of() {  # the kept environment of CPython $1 at $2: its folder
    local key
    key="$( (sha256sum pyproject.toml; echo "$2"; "$2" -VV) | sha256sum | cut -c1-16)"
    echo "$CACHE/$1-$key"
}

prepare() {  # makes the environment of CPython $1 at $2 where it is not kept (and drops older ones of $1)
    local venv started=$SECONDS
    venv="$(venv_of "$1" "$2")"
    if [ ! -f "$venv/.installed" ]; then
        find "$CACHE" -maxdepth 1 -name "$1-*" ! -path "$venv" -exec rm -rf {} + 2>/dev/null || true
        "$2" -m venv --clear "$venv"
        requirements > "$venv/requirements.txt"
        "$venv/bin/pip" install --quiet -r "$venv/requirements.txt"
        touch "$venv/.installed"
        echo "python-matrix: CPython $1 ($2): environment made in $((SECONDS - started)) s ($venv)"
    fi
}

unit_tests() {  # tests/unit under the environment of CPython $1 at $2, in a pytest folder of its own, which is also
    local started=$SECONDS temp status  # its TMPDIR: what it leaves when stopped goes with $MATRIX_TMP
    temp="$(mktemp -d "$MATRIX_TMP/$1-XXXXXX")"
    echo "python-matrix: CPython $1: tests/unit"
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TMPDIR="$temp" "$(venv_of "$1" "$2")/bin/python" -m pytest -q \
        -p no:cacheprovider --basetemp "$temp/t" tests/unit --deselect "$DESELECT" && status=0 || status=$?
    rm -rf "$temp"
    echo "python-matrix: CPython $1 done in $((SECONDS - started)) s"
    return "$status"
}

matrix() {  # every interpreter's run; their logs in $LOGS; the versions that failed in $LOGS/failed
    local version pids=() names=()
    : > "$LOGS/failed"
    for version in "${versions[@]}"; do  # one after the other: pip's cache is shared
        prepare "$version" "${pythons[$version]}" > "$LOGS/$version.log" 2>&1 || echo "$version" >> "$LOGS/failed"
    done
    for version in "${versions[@]}"; do
        grep -qx "$version" "$LOGS/failed" && continue
        unit_tests "$version" "${pythons[$version]}" >> "$LOGS/$version.log" 2>&1 &
        pids+=("$!") names+=("$version")
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || echo "${names[$i]}" >> "$LOGS/failed"
    done
}

outcome() {  # $1 = full: every log; else a line each, the whole log of a failed one. Fails where one failed.
    local version
    for version in "${versions[@]}"; do
        if [ "$1" = full ] || grep -qx "$version" "$LOGS/failed"; then
            cat "$LOGS/$version.log"
        else
            echo "python-matrix: CPython $version: $(grep -E '^[0-9]+ passed' "$LOGS/$version.log" | tail -1)"
        fi
    done
    if [ -s "$LOGS/failed" ]; then
        echo "python-matrix: tests/unit failed under CPython $(sort "$LOGS/failed" | tr '\n' ' ')"
        return 1
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        echo "python-matrix: no CPython ${missing[*]} on this machine: the unit tests did not run under it"
        [ "${CI:-}" != "true" ] || return 1
    fi
}

mkdir -p "$LOGS" "$CACHE"
MATRIX_TMP="$(mktemp -d "${TMPDIR:-/tmp}/hpcdl-matrix-XXXXXX")"
trap 'rm -rf "$MATRIX_TMP"' EXIT
here="$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
declare -A pythons
missing=() versions=()
for version in ${PYTHON_MATRIX-3.10 3.11 3.12 3.13}; do
    [ "$version" = "$here" ] && continue
    python="$(interpreter "$version")"
    if [ -z "$python" ]; then missing+=("$version"); else versions+=("$version") pythons[$version]="$python"; fi
done

if [ $# -eq 0 ]; then
    matrix
    outcome full
    exit
fi
# The matrix and COMMAND each in a process group of their own: the matrix ended whole if this script is stopped,
# and COMMAND interrupted whole as a terminal's Ctrl-C interrupts the foreground job, once, whichever signal came:
# make passes a SIGTERM to this script alone, and bash runs a trap only once its foreground command has ended, so
# COMMAND runs in the background, its standard input /dev/null as a background job's is, and SIGINT at its default:
# a job started in the background of a non-interactive shell (`make test &`, a CI runner's) inherits it ignored,
# and a pytest that ignores it cannot be interrupted.
with_sigint=(.venv/bin/python -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])')
matrix_pid="" command_pid="" interrupted=""
end_matrix() {  # its processes gone (a few seconds at most), then their folders
    if [ -n "$matrix_pid" ] && kill -- "-$matrix_pid" 2>/dev/null; then
        wait "$matrix_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 -- "-$matrix_pid" 2>/dev/null || break; sleep 0.2; done
    fi
    rm -rf "$MATRIX_TMP"
}
interrupt() {
    interrupted=1
    [ -n "$command_pid" ] || exit 130
    kill -INT -- "-$command_pid" 2>/dev/null || true
}
trap end_matrix EXIT
trap interrupt INT TERM
set -m
(renice -n 10 "$BASHPID" >/dev/null; matrix) &
matrix_pid=$!
echo "python-matrix: the unit tests under CPython ${versions[*]:-(none)} run beside: $*"
"${with_sigint[@]}" "$@" < /dev/null &
command_pid=$!
set +m
while true; do  # a trapped signal ends `wait` early: wait again until COMMAND has ended
    wait "$command_pid" && status=0 || status=$?
    [ "$status" -gt 128 ] && kill -0 "$command_pid" 2>/dev/null || break
done
command_pid=""
[ -z "$interrupted" ] || exit 130
wait "$matrix_pid" || true
matrix_pid=""
outcome short || [ "$status" -ne 0 ] || status=1
exit "$status"
