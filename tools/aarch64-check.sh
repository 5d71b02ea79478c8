#!/usr/bin/env bash
# The pytorch stack on aarch64 for real (`make test-aarch64`): an arm64 Debian tree (mmdebstrap --arch=arm64,
# its programs run by qemu-user through binfmt_misc) in which the runner, with the tree's CPython 3.11 and the
# public package index alone, installs the stack's cpu lock and runs pytorch-ddp at its tiny sizes on two ranks
# with one timed iteration. Exit 0 only when that run wrote one record with status ok whose machine is aarch64.
# The tree, the runner's packages and the stack in it are kept under the cache
# (${XDG_CACHE_HOME:-~/.cache}/hpc-dl-bench/test-deps/), so a second run only runs the case.
# Needs root (chroot and mounts in a private mount namespace); what else it needs (mmdebstrap, arch-test,
# qemu-user-static and its binfmt_misc handler) tools/aarch64-deps.sh installs and registers first.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/hpc-dl-bench/test-deps"
tree="$cache/debian-bookworm-arm64"
out=/tmp/aarch64-check  # inside the tree: the run's records and run folders, new each time
say() { echo "aarch64-check: $*"; }
source "$repo/tools/debian-tree.sh"
fail() { echo "aarch64-check: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (chroot and bind mounts into the arm64 tree)"
"$repo/tools/aarch64-deps.sh"  # mmdebstrap, arch-test, qemu-user-static and the binfmt handler, or all missing named

started=$SECONDS
# git: the record's provenance (the checkout's commit)
make_tree python3,python3-venv,ca-certificates,git bookworm --arch=arm64
rm -rf "${tree:?}$out"

# The processor qemu emulates, and its identity where programs read it: qemu-user passes the host's x86
# /proc/cpuinfo and /sys/devices/system/cpu through, and torch's oneDNN, finding no MIDR_EL1 there, crashes
# at `import torch` (SIGSEGV). A Neoverse N1 (Armv8.2): the newest Neoverse qemu 7.2 models; Grace is a V2.
qemu_cpu=neoverse-n1 midr=0x00000000413fd0c1
cpus=$(nproc --all)
identity="$cache/arm64-cpu-identity"
rm -rf "$identity" && mkdir -p "$identity"
for ((n = 0; n < cpus; n++)); do
    printf 'processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: %s\nCPU implementer\t: 0x41\nCPU architecture: 8\n%s\n\n' \
        "$n" "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs" \
        $'CPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1'
done > "$identity/cpuinfo"

in_tree() {  # runs $1 with bash inside the tree, the checkout at /src read-only; the mounts end with it
    unshare --mount --propagation private -- bash -euc '
        tree=$1 identity=$4 midr=$5 cpus=$6
        mount -t proc proc "$tree/proc"
        mount --bind "$identity/cpuinfo" "$tree/proc/cpuinfo"
        mount --rbind /dev "$tree/dev"
        mount -t sysfs sysfs "$tree/sys"
        cpu_dir="$tree/sys/devices/system/cpu"
        mount -t tmpfs arm64-cpus "$cpu_dir"
        for f in online possible present kernel_max; do cat "/sys/devices/system/cpu/$f" > "$cpu_dir/$f"; done
        for ((n = 0; n < cpus; n++)); do
            mkdir -p "$cpu_dir/cpu$n/regs/identification"
            echo "$midr" > "$cpu_dir/cpu$n/regs/identification/midr_el1"
            echo 0x0000000000000000 > "$cpu_dir/cpu$n/regs/identification/revidr_el1"
        done
        mount --bind -o ro "$2" "$tree/src"
        exec chroot "$tree" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 QEMU_CPU="$7" \
            PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt \
            PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 /bin/bash -euc "$3"
    ' in-tree "$tree" "$repo" "$1" "$identity" "$midr" "$cpus" "$qemu_cpu"
}

install_runner

step=$SECONDS
say "pytorch-ddp, two ranks, tiny sizes, one timed iteration (the stack is installed first where it is not yet)"
in_tree "cd /src && /opt/runner/bin/python -m suite run --case pytorch-ddp --gpus-per-node 2 --flavour cpu \
    --results-dir $out/results --runs-dir $out/runs --tiny -- --num-iters 1" \
    || fail "the run in the arm64 tree failed (exit $?)"
say "run in $((SECONDS - step)) s"

python3 - "$tree$out/results" <<'EOF' || exit 1
import json, pathlib, sys

records = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
if len(records) != 1:
    sys.exit(f"aarch64-check: expected one record in {sys.argv[1]}, found {len(records)}")
record = json.loads(records[0].read_text())
hosts = record["provenance"]["host_info"]
platforms = [info.get("platform", "") for info in hosts.values()]
if record.get("status") != "ok":
    sys.exit(f"aarch64-check: {records[0].name} has status {record.get('status')}: {record.get('reason')}")
if not platforms or not all("-aarch64-" in p for p in platforms):
    sys.exit(f"aarch64-check: {records[0].name} was not made on aarch64: platform {platforms}")
print(f"aarch64-check: ok: {records[0].name}, status ok, platform {platforms[0]}, "
      f"stack {record['provenance'].get('stack_location')}")
EOF
say "done in $((SECONDS - started)) s"
