#!/usr/bin/env bash
# What CI does, here: a fresh clone of this checkout's HEAD, an empty XDG cache (no stacks, images, pip cache or
# Apptainer tree from earlier runs), CI=true, `bash .ci/run`; the log kept beside the clone. CI allows 90 minutes;
# the suite aims at 60 from an empty cache and 40 from a warm one (CONTRIBUTING.md, "The tests").
#   tools/ci-fresh-clone.sh [FOLDER]        FOLDER (default: a new one under /tmp) holds clone/, cache/ and ci.log
#   KEEP_CACHE=DIR tools/ci-fresh-clone.sh  a warm run: DIR as the cache, kept as it is
set -euo pipefail
source_repo="$(cd "$(dirname "$0")/.." && pwd)"
folder="${1:-$(mktemp -d /tmp/hpcdl-ci-XXXXXX)}"
mkdir -p "$folder"
[ ! -e "$folder/clone" ] || { echo "ci-fresh-clone: $folder/clone exists; name an empty folder" >&2; exit 2; }
cache="${KEEP_CACHE:-$folder/cache}"
if [ -z "${KEEP_CACHE:-}" ]; then rm -rf "$cache"; mkdir -p "$cache"; fi
git clone --quiet "$source_repo" "$folder/clone"
echo "ci-fresh-clone: $(git -C "$folder/clone" log -1 --format='%h %s') in $folder/clone, cache $cache, log $folder/ci.log"
cd "$folder/clone"
set +e
XDG_CACHE_HOME="$cache" CI=true bash .ci/run </dev/null 2>&1 | tee "$folder/ci.log"
status=${PIPESTATUS[0]}
echo "ci-fresh-clone: exit $status; log $folder/ci.log"
exit "$status"
