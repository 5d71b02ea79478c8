#!/usr/bin/env bash
# Apptainer for the tests, run as HPC centres run it: unprivileged. Debian 12 has no apptainer package;
# Debian's unstable release (sid) has it, so this makes a root filesystem of that release with
# mmdebstrap (from the mirror apt is configured with here) and writes an `apptainer` command that
# enters it through a mount namespace and pivot_root (Apptainer refuses a chroot) and runs its
# Apptainer as an unprivileged user, with this host's folders bound at their own paths and a fuse node
# of its own (squashfuse mounts a SIF instead of unpacking it at every start).
#
#   tools/apptainer-tree.sh            # prints the folder of the `apptainer` command (put it on PATH)
#   tools/apptainer-tree.sh --check    # exit 0 if the cached tree is complete, else 1 (makes nothing)
#
# The tree is cached under $XDG_CACHE_HOME/hpc-dl-bench/apptainer/tree-<hash of the package list>: it
# is remade only when that list (or the mirror or release) changes. Needs root (the command it writes
# does too: it enters the namespace as root and drops to the user before Apptainer starts).
# The user: APPTAINER_TEST_USER (default hpcdl-apptainer, uid/gid 2751), created on this host too so
# that the files a container writes have an owner here; /etc/subuid and /etc/subgid in the tree map it
# for `apptainer build --fakeroot`. NOTES.md ("Apptainer") says how this was found to work.
set -euo pipefail
RELEASE=sid
PACKAGES=apptainer,squashfs-tools,squashfuse,fuse3,ca-certificates
USER_NAME=${APPTAINER_TEST_USER:-hpcdl-apptainer}
USER_ID=${APPTAINER_TEST_UID:-2751}
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
mirror=${mirror:-http://deb.debian.org/debian}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/hpc-dl-bench/apptainer
key=$(printf '%s %s %s %s %s v1' "$RELEASE" "$PACKAGES" "$mirror" "$USER_NAME" "$USER_ID" | sha256sum | cut -c1-12)
tree=$cache/tree-$key
bin=$cache/bin-$key
home=/var/lib/$USER_NAME  # the user's HOME inside the tree (Apptainer's cache goes there)

if [ "${1:-}" = --check ]; then
    [ -e "$tree/.complete" ] && [ -x "$bin/apptainer" ]
    exit
fi
[ "$(id -u)" -eq 0 ] || { echo "apptainer-tree: needs root (it enters a mount namespace)" >&2; exit 1; }
for tool in mmdebstrap unshare setpriv pivot_root flock; do
    command -v "$tool" >/dev/null || { echo "apptainer-tree: needs $tool on PATH" >&2; exit 1; }
done

# the user, on this host (for file ownership) and in the tree
getent group "$USER_NAME" >/dev/null || groupadd --system --gid "$USER_ID" "$USER_NAME"
getent passwd "$USER_NAME" >/dev/null ||
    useradd --system --uid "$USER_ID" --gid "$USER_ID" --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$USER_NAME"

mkdir -p "$cache"
exec 9>"$cache/lock"  # one maker at a time; a second session waits, then finds the tree made
flock 9
if [ ! -e "$tree/.complete" ]; then
    started=$(date +%s)
    rm -rf "$tree" "$tree.tar" "$bin"
    # the mirror's sid Release file can be past its Valid-Until
    mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' --include="$PACKAGES" \
        "$RELEASE" "$tree.tar" "$mirror" >&2
    mkdir -p "$tree"
    tar -xf "$tree.tar" -C "$tree"
    rm -f "$tree.tar"
    echo "$USER_NAME:x:$USER_ID:$USER_ID::$home:/bin/bash" >> "$tree/etc/passwd"
    echo "$USER_NAME:x:$USER_ID:" >> "$tree/etc/group"
    echo "$USER_NAME:100000:65536" > "$tree/etc/subuid"
    echo "$USER_NAME:100000:65536" > "$tree/etc/subgid"
    rm -f "$tree/etc/localtime"
    cp -L /etc/localtime "$tree/etc/localtime" 2>/dev/null || cp "$tree/usr/share/zoneinfo/UTC" "$tree/etc/localtime"
    mkdir -p "$tree$home" "$tree/.oldroot" "$tree/run/fusedev"
    chown "$USER_ID:$USER_ID" "$tree$home"
    touch "$tree/.complete"
    version=$(dpkg-query --admindir="$tree/var/lib/dpkg" -W -f '${Version}' apptainer 2>/dev/null || true)
    echo "apptainer-tree: $RELEASE tree with apptainer $version made in $(( $(date +%s) - started )) s at $tree" >&2
fi

mkdir -p "$bin"
cat > "$bin/apptainer.partial" <<EOF
#!/bin/bash
# Written by tools/apptainer-tree.sh: the Apptainer of $tree, run as $USER_NAME (uid $USER_ID)
# in a mount namespace of its own, with this host's folders bound at their own paths.
# APPTAINER_TREE_BINDS adds folders (space-separated).
exec "$bin/apptainer-tree-enter.sh" "$tree" "$USER_ID" "$home" /usr/bin/apptainer "\$@"
EOF
cp "$(dirname "$0")/apptainer-tree-enter.sh" "$bin/apptainer-tree-enter.sh"
chmod 755 "$bin/apptainer.partial" "$bin/apptainer-tree-enter.sh"
mv "$bin/apptainer.partial" "$bin/apptainer"
echo "$bin"
