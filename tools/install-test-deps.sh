#!/usr/bin/env bash
# System packages the tests use (Debian): Chromium for rendering the reports headless (required),
# OpenSSH server and client for the ssh scheduler's tests, SLURM and munge for the slurm scheduler's
# tests (their fixtures skip, saying why, when these cannot be installed).
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
[ ${#required[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    elif [ ${#required[@]} -eq 0 ]; then
        echo "cannot install ${optional[*]} (not root, no passwordless sudo): the ssh/slurm tests will be skipped" >&2
        exit 0
    fi
fi
apt_install() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
policy=/usr/sbin/policy-rc.d
if [ ${#optional[@]} -gt 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    trap '$sudo rm -f "$policy"' EXIT
fi
echo "installing for the tests: ${required[*]} ${optional[*]}"
$sudo apt-get update -qq
[ ${#required[@]} -eq 0 ] || apt_install "${required[@]}"
[ ${#optional[@]} -eq 0 ] || apt_install "${optional[@]}" ||
    echo "could not install ${optional[*]}: the ssh/slurm tests will be skipped" >&2
