#!/bin/bash
# usage (as root): apptainer-tree-enter.sh TREE UID HOME PROGRAM ARGS...
# Runs PROGRAM of the root filesystem TREE as uid/gid UID with HOME, in a mount namespace of its own:
# the tree bound onto itself, /proc /sys /dev and this host's folders at their own paths (every top
# folder but the system's own: /tmp /home /srv /mnt /work /scratch, a CI's /check...; the current
# folder's top folder; $APPTAINER_TREE_BINDS), a fuse node of its own over /dev/fuse, then pivot_root
# into it (Apptainer refuses a chroot) and the old root unmounted. The environment and the current
# folder are kept; every step is an exec, so signals sent to this process reach PROGRAM.
# Written by tools/apptainer-tree.sh.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "apptainer (test tree): must be started as root; it runs Apptainer as uid $2" >&2; exit 1; }
here=$PWD
top=/$(echo "$here" | cut -d/ -f2)
exec unshare --mount --propagation private bash -c '
set -e
tree=$1; uid=$2; home=$3; here=$4; top=$5; shift 5
mount --bind "$tree" "$tree"
for d in proc sys dev; do mount --rbind "/$d" "$tree/$d"; done
host_folders=$(for p in /*; do
    case ${p#/} in bin|boot|dev|etc|lib|lib32|lib64|libx32|lost+found|media|opt|proc|root|run|sbin|sys|usr|var) continue ;; esac
    [ -d "$p" ] && [ ! -L "$p" ] && echo "$p"
done; true)
for p in $host_folders "$top" ${APPTAINER_TREE_BINDS:-}; do
    [ -d "$p" ] && [ "$p" != / ] && ! mountpoint -q "$tree$p" || continue
    mkdir -p "$tree$p" && mount --rbind "$p" "$tree$p"
done
for f in /etc/hosts /etc/resolv.conf; do
    [ -f "$f" ] && touch "$tree$f" && mount --bind "$f" "$tree$f"
done
mount -t tmpfs -o size=64k tmpfs "$tree/run/fusedev"
mknod -m 666 "$tree/run/fusedev/fuse" c 10 229
mount --bind "$tree/run/fusedev/fuse" "$tree/dev/fuse"
cd "$tree"; pivot_root . .oldroot; cd /
umount -l /.oldroot
cd "$here" 2>/dev/null || cd /
export HOME=$home USER=$(getent passwd "$uid" | cut -d: -f1)
exec setpriv --reuid "$uid" --regid "$uid" --clear-groups -- "$@"
' apptainer-tree-enter "$1" "$2" "$3" "$here" "$top" "${@:4}"
