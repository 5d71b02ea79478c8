#!/usr/bin/env bash
# System packages the tests use (Debian): Chromium for rendering the reports headless (required),
# OpenSSH server and client for the ssh scheduler's tests, SLURM and munge for the slurm scheduler's
# tests, Docker's engine and mmdebstrap for the container images' tests, Lmod for the modules runtime's
# tests (their fixtures skip, saying why, when these cannot be installed). Under CI=true every one of
# them is required: the script exits 1 saying what it could not install and why, so that CI cannot
# go green by skipping the tests of a component (the fixtures fail there too). Apptainer is in no Debian 12
# package: its tests' fixture makes it with mmdebstrap (tools/apptainer-tree.sh, cached under the XDG cache).
# Installs only what is missing; needs root or passwordless sudo. Services are not started by the
# installation (a policy-rc.d denies it while apt runs): the tests start their own daemons.
set -euo pipefail
required=()
command -v chromium >/dev/null 2>&1 || required+=(chromium)
optional=()
[ -x /usr/sbin/sshd ] || optional+=(openssh-server)
command -v ssh >/dev/null 2>&1 || optional+=(openssh-client)
[ -x /usr/sbin/slurmctld ] || optional+=(slurmctld)
[ -x /usr/sbin/slurmd ] || optional+=(slurmd)
command -v sbatch >/dev/null 2>&1 || optional+=(slurm-client)
[ -x /usr/sbin/munged ] || optional+=(munge)
command -v ip >/dev/null 2>&1 || optional+=(iproute2)  # network namespaces: the two-node SLURM cluster
[ -x /usr/sbin/dockerd ] || optional+=(docker.io)  # the engine the images are built and run in
command -v mmdebstrap >/dev/null 2>&1 || optional+=(mmdebstrap)  # their Debian base (BASE=debian)
[ -r /usr/share/lmod/lmod/init/bash ] || optional+=(lmod)  # environment modules: runtime modules
command -v ch-convert >/dev/null 2>&1 || optional+=(charliecloud-runtime charliecloud-builders)  # RUNTIME=charliecloud
command -v podman >/dev/null 2>&1 || optional+=(podman)  # RUNTIME=podman
command -v catatonit >/dev/null 2>&1 || optional+=(catatonit)  # podman run --init
command -v newuidmap >/dev/null 2>&1 || optional+=(uidmap)  # rootless podman's subordinate ids
daemons=${#optional[@]}
if [ "${CI:-}" = true ]; then
    required+=("${optional[@]}")
    optional=()
fi
[ ${#required[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

cannot() {  # $1: why. Fatal when something required is missing; else the ssh/slurm tests skip.
    if [ ${#required[@]} -gt 0 ]; then
        echo "cannot install ${required[*]}${optional[*]:+ ${optional[*]}}: $1${CI:+ (CI=$CI)}" >&2
        exit 1
    fi
    echo "cannot install ${optional[*]}: $1; the ssh/slurm/docker/lmod tests will be skipped" >&2
    exit 0
}
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    else
        cannot "not root and no passwordless sudo (sudo -n)"
    fi
fi
apt_install() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
policy=/usr/sbin/policy-rc.d
if [ "$daemons" -gt 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    trap '$sudo rm -f "$policy"' EXIT
fi
echo "installing for the tests: ${required[*]} ${optional[*]}"
$sudo apt-get update -qq || cannot "apt-get update failed"
if [ ${#required[@]} -gt 0 ] && ! apt_install "${required[@]}"; then
    cannot "apt-get install failed"
fi
required=()
[ ${#optional[@]} -eq 0 ] || apt_install "${optional[@]}" || cannot "apt-get install failed"
