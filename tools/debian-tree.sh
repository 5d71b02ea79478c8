# Sourced by tools/aarch64-check.sh and tools/distro-check.sh: what both do to a Debian or Ubuntu tree of their
# own under the cache. The caller sets `tree` (its folder) and defines `say` and `in_tree` (how a command runs inside
# the tree, the checkout at /src read-only) before calling these.

# make_tree PACKAGES SUITE [MMDEBSTRAP OPTIONS...] [-- MIRRORS...]: the tree (from Debian's mirror where none is
# named), made once per package list (its .complete says which), then the host's names (localhost: the ranks'
# rendezvous), resolver and CA bundle put in it, as for a container on the host network; not pip's settings (a local
# wheel folder, local indexes): the tree installs from the public index alone
make_tree() {
    local packages=$1 suite=$2 started=$SECONDS options=() mirrors=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
    if [ $# -gt 0 ]; then shift; mirrors=("$@"); fi
    if [ "$(cat "$tree/.complete" 2>/dev/null)" != "$packages" ]; then
        say "making the $suite tree in $tree (mmdebstrap, once)"
        rm -rf "$tree.part"
        mkdir -p "$(dirname "$tree")"
        mmdebstrap --quiet --variant=minbase "${options[@]}" --include="$packages" "$suite" "$tree.part" "${mirrors[@]}"
        rm -rf "$tree"
        mv "$tree.part" "$tree"
        echo "$packages" > "$tree/.complete"
        say "tree made in $((SECONDS - started)) s"
    fi
    cp /etc/hosts /etc/resolv.conf "$tree/etc/"
    cp /etc/ssl/certs/ca-certificates.crt "$tree/etc/ssl/certs/host-ca-certificates.crt"
    mkdir -p "$tree/src"
}

# install_runner: the runner's own packages (pyproject's dependencies) in the tree's /opt/runner, remade when they
# change; the checkout at /src is on the venv's path (a .pth file), as an editable install would put it, without
# writing into the read-only checkout
install_runner() {
    local started=$SECONDS
    in_tree 'python3 - /src/pyproject.toml > /opt/runner-requirements.txt' <<'EOF'
import sys, tomllib
print(*tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"], sep="\n")
EOF
    if ! cmp -s "$tree/opt/runner-requirements.txt" "$tree/opt/runner/requirements.txt" 2>/dev/null; then
        say "installing the runner's packages into the tree's /opt/runner"
        in_tree 'rm -rf /opt/runner && python3 -m venv /opt/runner
                 /opt/runner/bin/pip install --quiet --use-pep517 -r /opt/runner-requirements.txt
                 echo /src > "$(/opt/runner/bin/python -c "import sysconfig; print(sysconfig.get_path(\"purelib\"))")/checkout.pth"
                 cp /opt/runner-requirements.txt /opt/runner/requirements.txt'
        say "runner's packages in $((SECONDS - started)) s"
    fi
}
