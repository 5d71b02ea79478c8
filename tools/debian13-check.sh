#!/usr/bin/env bash
# The suite on Debian 13 for real (`make test-debian13`): a Debian trixie tree (mmdebstrap) with its own CPython 3.13
# and GCC 14 and only the packages README.md asks for, in which the runner, with the public package index alone:
#   1. runs README's first command at small sizes (pytorch-synthetic: Horovod built from its sdist with GCC 14);
#   2. runs pytorch-gpt compiled (torch.compile's Inductor builds C++ against the tree's Python headers);
#   3. with the Python headers hidden, is refused the compiled run before launch, in one line naming python3.13-dev.
# Exit 0 only when both runs wrote a record with status ok made under Python 3.13 and the refusal said so.
# The tree and the stacks built in it are kept under the cache (${XDG_CACHE_HOME:-~/.cache}/hpc-dl-bench/test-deps/),
# so a second run only runs the cases. Needs root (chroot and mounts in a private mount namespace) and mmdebstrap.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/hpc-dl-bench/test-deps"
tree="$cache/debian-trixie-amd64"
out=/tmp/debian13-check  # inside the tree: the runs' records and run folders, new each time
say() { echo "debian13-check: $*"; }
source "$repo/tools/debian-tree.sh"
fail() { echo "debian13-check: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (chroot and bind mounts into the Debian tree)"
command -v mmdebstrap >/dev/null 2>&1 || apt-get install -y -qq mmdebstrap >/dev/null || fail "needs mmdebstrap"

started=$SECONDS
# README's list for a Debian or Ubuntu host, and git (the record's provenance: the checkout's commit)
make_tree python3,python3-venv,python3-dev,g++,make,patch,ca-certificates,git trixie
rm -rf "${tree:?}$out"

in_tree() {  # runs $1 with bash inside the tree, the checkout at /src read-only; $2=hide-headers hides Python.h
    unshare --mount --propagation private -- bash -euc '
        tree=$1
        mount -t proc proc "$tree/proc"
        mount --rbind /dev "$tree/dev"
        mount -t sysfs sysfs "$tree/sys"
        mount --bind -o ro "$2" "$tree/src"
        if [ "$4" = hide-headers ]; then
            for include in "$tree"/usr/include/python3.*; do mount -t tmpfs no-headers "$include"; done
        fi
        exec chroot "$tree" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
            PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt \
            PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 /bin/bash -euc "$3"
    ' in-tree "$tree" "$repo" "$1" "${2:-}"
}

install_runner
suite="cd /src && /opt/runner/bin/python -m suite run --results-dir $out/results --runs-dir $out/runs"

step=$SECONDS
say "pytorch-synthetic at small sizes (Horovod is built with the tree's GCC first where its stack is not yet)"
in_tree "$suite --case pytorch-synthetic -- --image-size 64 --batch-size 8 --num-iters 3" \
    || fail "pytorch-synthetic in the Debian 13 tree failed (exit $?)"
say "pytorch-synthetic in $((SECONDS - step)) s"
step=$SECONDS
say "pytorch-gpt compiled, tiny sizes"
in_tree "$suite --case pytorch-gpt --tiny -- --compile" || fail "the compiled pytorch-gpt run failed (exit $?)"
say "pytorch-gpt in $((SECONDS - step)) s"

say "pytorch-gpt compiled with the Python headers hidden: refused before launch"
set +e
refused=$(in_tree "$suite --case pytorch-gpt --tiny -- --compile" hide-headers 2>&1)
status=$?
set -e
[ "$status" -eq 2 ] && grep -q "lacks the headers of python3.13 .*apt install python3.13-dev" <<< "$refused" \
    || fail "expected exit 2 naming python3.13-dev without the headers, got exit $status: $refused"

python3 - "$tree$out/results" <<'EOF' || exit 1
import json, pathlib, sys

records = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
cases = sorted(json.loads(r.read_text())["case"] for r in records)
if cases != ["pytorch-gpt", "pytorch-synthetic"]:
    sys.exit(f"debian13-check: expected one record each of pytorch-gpt and pytorch-synthetic, found {cases}")
for path in records:
    record = json.loads(path.read_text())
    python = record["provenance"].get("versions", {}).get("python", "")  # the ranks' own
    if record.get("status") != "ok":
        sys.exit(f"debian13-check: {path.name} has status {record.get('status')}: {record.get('reason')}")
    if not python.startswith("3.13."):
        sys.exit(f"debian13-check: {path.name}'s ranks did not run under the tree's Python 3.13: {python!r}")
    print(f"debian13-check: ok: {path.name}, status ok, ranks on Python {python}")
EOF
say "done in $((SECONDS - started)) s"
