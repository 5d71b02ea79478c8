#!/bin/sh
# tools/check-python.sh PYTHON [VENV]: the interpreter the runner's environment is made with (BOOTSTRAP_PYTHON) is a
# CPython 3.10-3.13, and where VENV exists it was made with that interpreter. Otherwise one line on stderr saying what
# is wrong and how to fix it, and exit 2 (make's own status for a refusal), before anything is installed.
python=$1
venv=$2
# version and base prefix: two interpreters of one version and installation make the same environments
describe='import sys; print("%d.%d.%d" % sys.version_info[:3], sys.base_prefix, sys.implementation.name)'

if ! found=$("$python" -c "$describe" 2>/dev/null); then
    echo "BOOTSTRAP_PYTHON=$python does not run here: name a CPython 3.10-3.13 (e.g. BOOTSTRAP_PYTHON=python3.11)" >&2
    exit 2
fi
set -- $found
version=$1 prefix=$2 implementation=$3
case "$implementation-$version" in
    cpython-3.1[0-3].*) ;;
    *) echo "BOOTSTRAP_PYTHON=$python is $implementation $version; the suite supports CPython 3.10-3.13" \
            "(e.g. BOOTSTRAP_PYTHON=python3.11)" >&2
       exit 2 ;;
esac
[ -n "$venv" ] && [ -e "$venv/bin/python" ] || exit 0
if ! made=$("$venv/bin/python" -c "$describe" 2>/dev/null); then
    echo "$venv was made with an interpreter that no longer runs; remake it with BOOTSTRAP_PYTHON=$python:" \
         "rm -rf $venv, then make again" >&2
    exit 2
fi
set -- $made
if [ "$1 $2" != "$version $prefix" ]; then
    echo "BOOTSTRAP_PYTHON=$python is $version ($prefix) but $venv was made with $1 ($2): to use $python," \
         "rm -rf $venv and make again; to keep $venv, leave BOOTSTRAP_PYTHON out" >&2
    exit 2
fi
