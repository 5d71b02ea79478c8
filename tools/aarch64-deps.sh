#!/usr/bin/env bash
# What `make test-aarch64` (tools/aarch64-check.sh) needs on this machine, installed and registered here, as
# tools/install-test-deps.sh does for `make test`: mmdebstrap and arch-test (which mmdebstrap asks before it
# makes a foreign tree), qemu-user-static (the aarch64 emulator), and the kernel's binfmt_misc handler for
# aarch64 programs with flag F, registered here (no service registers it in a container or on a CI machine;
# binfmt_misc is mounted first where it is not). Installs only what is missing; needs root. Where a piece
# cannot be installed or registered, every missing piece is named at once, in one line, and it exits 1.
set -euo pipefail
binfmt_dir=${BINFMT_DIR:-/proc/sys/fs/binfmt_misc}
qemu=${QEMU_AARCH64:-/usr/bin/qemu-aarch64-static}
# An aarch64 ELF executable's header, as qemu's own binfmt configuration (qemu-binfmt-conf.sh) matches it.
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

missing_packages() {
    local packages=()
    command -v mmdebstrap >/dev/null 2>&1 || packages+=(mmdebstrap)
    command -v arch-test >/dev/null 2>&1 || packages+=(arch-test)
    [ -x "$qemu" ] || packages+=(qemu-user-static)
    echo "${packages[*]}"
}

handler_ok() {  # F: the kernel keeps the emulator open, so it runs aarch64 programs inside the chroot too
    grep -qx enabled "$binfmt_dir/qemu-aarch64" 2>/dev/null && grep -q '^flags: .*F' "$binfmt_dir/qemu-aarch64"
}

register_handler() {  # replaces a handler without flag F (or disabled) with one that has it
    [ -e "$binfmt_dir/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt_dir" 2>/dev/null || return 1
    if [ -e "$binfmt_dir/qemu-aarch64" ]; then
        echo -1 > "$binfmt_dir/qemu-aarch64" || return 1
    fi
    printf ':qemu-aarch64:M::%s:%s:%s:F\n' "$magic" "$mask" "$qemu" > "$binfmt_dir/register" 2>/dev/null || return 1
    handler_ok
}

install_packages() {  # $@: Debian packages; says why not where they cannot be installed
    if [ "$(id -u)" -ne 0 ]; then
        echo "not root"
    elif ! command -v apt-get >/dev/null 2>&1; then
        echo "no apt-get"
    elif ! apt-get update -qq >/dev/null 2>&1; then
        echo "apt-get update failed"
    elif ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
        echo "apt-get install $* failed"
    fi
}

main() {
    local packages why="" problems=()
    packages=$(missing_packages)
    if [ -n "$packages" ]; then
        echo "aarch64-deps: installing $packages"
        # shellcheck disable=SC2086 # one word per package
        why=$(install_packages $packages)
        packages=$(missing_packages)
        [ -z "$packages" ] || problems+=("the packages $packages${why:+ ($why)}")
    fi
    if ! handler_ok; then
        if [ ! -x "$qemu" ]; then
            problems+=("the aarch64 binfmt handler (it needs $qemu, from qemu-user-static)")
        elif [ "$(id -u)" -ne 0 ]; then
            problems+=("the aarch64 binfmt handler in $binfmt_dir (registering it needs root)")
        elif ! register_handler; then
            problems+=("the aarch64 binfmt handler: $binfmt_dir could not be mounted or written (a container without" \
                       "the right to; register it on the host: update-binfmts --enable qemu-aarch64)")
        else
            echo "aarch64-deps: registered the aarch64 binfmt handler ($qemu, flag F)"
        fi
    fi
    if [ ${#problems[@]} -gt 0 ]; then
        local IFS=";"
        echo "aarch64-check: cannot set up${problems[*]/#/ }" >&2
        exit 1
    fi
}

main "$@"
