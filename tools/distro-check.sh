#!/usr/bin/env bash
# The suite on a current distribution for real (`make test-debian13`, `make test-ubuntu2404`): a tree of that
# distribution (mmdebstrap) with its own CPython and GCC and only the packages README.md asks for, in which the
# runner, with the public package index alone:
#   1. runs README's first command at small sizes (pytorch-synthetic: Horovod built from its sdist with the tree's GCC);
#   2. runs pytorch-gpt compiled (torch.compile's Inductor builds C++ against the tree's Python headers);
#   3. with the Python headers hidden, is refused the compiled run before launch, in one line naming python3.X-dev.
# Exit 0 only when both runs wrote a record with status ok made under the tree's Python and the refusal said so.
# The tree and the stacks built in it are kept under the cache (${XDG_CACHE_HOME:-~/.cache}/hpc-dl-bench/test-deps/),
# so a second run only runs the cases. Needs root (chroot and mounts in a private mount namespace) and mmdebstrap.
# Usage: tools/distro-check.sh debian13|ubuntu2404
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/hpc-dl-bench/test-deps"
distro=${1:-}
out=/tmp/distro-check  # inside the tree: the runs' records and run folders, new each time
say() { echo "$distro-check: $*"; }
source "$repo/tools/debian-tree.sh"
fail() { echo "$distro-check: $*" >&2; exit 1; }

# Ubuntu's archive key, from the release's own ubuntu-keyring package, pinned by hash: Debian's hosts lack it
ubuntu_archive=http://archive.ubuntu.com/ubuntu
ubuntu_keyring_deb=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb
ubuntu_keyring_sha256=36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8
ubuntu_keyring() {  # prints the path of Ubuntu's archive keyring, fetched and checked once
    local folder="$cache/ubuntu-keyring"
    if [ ! -s "$folder/usr/share/keyrings/ubuntu-archive-keyring.gpg" ]; then
        rm -rf "$folder" && mkdir -p "$folder"
        curl -fsS --retry 3 -o "$folder/keyring.deb" "$ubuntu_archive/$ubuntu_keyring_deb" \
            || fail "could not fetch $ubuntu_archive/$ubuntu_keyring_deb"
        echo "$ubuntu_keyring_sha256  $folder/keyring.deb" | sha256sum --check --quiet - \
            || fail "$ubuntu_keyring_deb does not have its pinned sha256"
        dpkg-deb -x "$folder/keyring.deb" "$folder"
    fi
    echo "$folder/usr/share/keyrings/ubuntu-archive-keyring.gpg"
}

case "$distro" in
    debian13 | ubuntu2404) ;;
    *) echo "distro-check: unknown distribution '$distro': debian13 or ubuntu2404" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || fail "needs root (chroot and bind mounts into the distribution's tree)"
command -v mmdebstrap >/dev/null 2>&1 || apt-get install -y -qq mmdebstrap >/dev/null || fail "needs mmdebstrap"

case "$distro" in
    debian13)  # GCC 14, CPython 3.13
        release=trixie; tree="$cache/debian-trixie-amd64"; tree_options=() ;;
    ubuntu2404)  # GCC 13, CPython 3.12; with the release's updates, as an installed host has them
        release=noble; tree="$cache/ubuntu-noble-amd64"
        keyring=$(ubuntu_keyring)
        tree_options=(--keyring="$keyring" --components=main,universe --)
        for pocket in noble noble-updates noble-security; do
            tree_options+=("deb $ubuntu_archive $pocket main universe")
        done ;;
esac

started=$SECONDS
# README's list for a Debian or Ubuntu host, and git (the record's provenance: the checkout's commit)
make_tree python3,python3-venv,python3-dev,g++,make,patch,ca-certificates,git "$release" "${tree_options[@]}"
python=$(chroot "$tree" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')  # what the ranks must run
say "the tree's $(chroot "$tree" python3 --version), $(chroot "$tree" g++ --version | head -1)"
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
run="cd /src && /opt/runner/bin/python -m suite run --results-dir $out/results --runs-dir $out/runs"

step=$SECONDS
say "pytorch-synthetic at small sizes (Horovod is built with the tree's GCC first where its stack is not yet)"
in_tree "$run --case pytorch-synthetic -- --image-size 64 --batch-size 8 --num-iters 3" \
    || fail "pytorch-synthetic in the $release tree failed (exit $?)"
say "pytorch-synthetic in $((SECONDS - step)) s"
step=$SECONDS
say "pytorch-gpt compiled, tiny sizes"
in_tree "$run --case pytorch-gpt --tiny -- --compile" || fail "the compiled pytorch-gpt run failed (exit $?)"
say "pytorch-gpt in $((SECONDS - step)) s"

say "pytorch-gpt compiled with the Python headers hidden: refused before launch"
set +e
refused=$(in_tree "$run --case pytorch-gpt --tiny -- --compile" hide-headers 2>&1)
status=$?
set -e
[ "$status" -eq 2 ] && grep -q "lacks the headers of python$python .*apt install python$python-dev" <<< "$refused" \
    || fail "expected exit 2 naming python$python-dev without the headers, got exit $status: $refused"

python3 - "$tree$out/results" "$distro" "$python" <<'EOF' || exit 1
import json, pathlib, sys

results, distro, python_wanted = sys.argv[1:]
records = sorted(pathlib.Path(results).glob("*.json"))
cases = sorted(json.loads(r.read_text())["case"] for r in records)
if cases != ["pytorch-gpt", "pytorch-synthetic"]:
    sys.exit(f"{distro}-check: expected one record each of pytorch-gpt and pytorch-synthetic, found {cases}")
for path in records:
    record = json.loads(path.read_text())
    python = record["provenance"].get("versions", {}).get("python", "")  # the ranks' own
    if record.get("status") != "ok":
        sys.exit(f"{distro}-check: {path.name} has status {record.get('status')}: {record.get('reason')}")
    if not python.startswith(f"{python_wanted}."):
        sys.exit(f"{distro}-check: {path.name}'s ranks did not run under the tree's Python {python_wanted}: {python!r}")
    print(f"{distro}-check: ok: {path.name}, status ok, ranks on Python {python}")
EOF
say "done in $((SECONDS - started)) s"
