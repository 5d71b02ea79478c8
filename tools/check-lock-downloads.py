#!/usr/bin/env python3
"""Whether a lock's files for one processor download from their index with the hashes the lock pins:
each file the lock's `.files` list names that installs on a covered target of that processor (a wheel of
its tags, or a pure-Python one) is streamed from the index, hashed on the way and thrown away, so a
3 GB check needs no disk. Prints one line per file, then the count, size and time; exit 1 on any
mismatch or file the index does not list.

  tools/check-lock-downloads.py [--machine aarch64] [--index-url URL] LOCK...

e.g. `.venv/bin/python tools/check-lock-downloads.py containers/pytorch/cuda/requirements.lock`.
"""

import argparse
import hashlib
import json
import sys
import time
import urllib.request
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from suite.stacks import lock_targets  # noqa: E402 (the checkout's package, after its path is known)

CHUNK = 1 << 20


def wanted_files(lock: Path, machine: str) -> dict[str, str]:
    """file name -> sha256 of the lock's files that install on a covered target of this processor."""
    coverage = lock_targets.read_coverage(lock)
    if coverage is None:
        raise SystemExit(f"{lock}: no '# covers:' line in its header (not written by `make locks`)")
    targets = [t for t in coverage.covered if t.machine == machine]
    if not targets:
        raise SystemExit(f"{lock}: covers {coverage.keys()}, nothing on {machine}")
    return {name: sha for sha, name in lock_targets.listed_files(lock).items()
            if any(lock_targets.files_cover([name], t, coverage.glibc) for t in targets)}


def index_urls(name: str, index: str) -> dict[str, str]:
    """file name -> URL of every file the index lists for the project."""
    request = urllib.request.Request(f"{index}/{canonicalize_name(name)}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as page:
        return {f["filename"]: f["url"] for f in json.load(page)["files"]}


def streamed_sha256(url: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=120) as body:
        while chunk := body.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def check(lock: Path, machine: str, index: str) -> tuple[int, int, list[str]]:
    files = wanted_files(lock, machine)
    projects = {parse_wheel_filename(name)[0] for name in files}
    urls = {}
    for project in sorted(projects):
        urls.update(index_urls(project, index))
    total, bad = 0, []
    for name, sha in sorted(files.items()):
        if name not in urls:
            bad.append(f"{name}: not listed by {index}")
            print(f"  missing  {name}", flush=True)
            continue
        got, size = streamed_sha256(urls[name])
        total += size
        verdict = "ok" if got == sha else "MISMATCH"
        if got != sha:
            bad.append(f"{name}: sha256 {got}, the lock pins {sha}")
        print(f"  {verdict:8} {size / 1e6:9.1f} MB  {name}", flush=True)
    return len(files), total, bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locks", nargs="+", type=Path)
    parser.add_argument("--machine", default="aarch64", choices=["aarch64", "x86_64"])
    parser.add_argument("--index-url", default="https://pypi.org/simple")
    args = parser.parse_args()
    failed = False
    for lock in args.locks:
        started = time.monotonic()
        print(f"{lock} ({args.machine}, from {args.index_url}):", flush=True)
        count, total, bad = check(lock, args.machine, args.index_url.rstrip("/"))
        seconds = time.monotonic() - started
        print(f"{lock}: {count - len(bad)} of {count} files match, {total / 1e9:.2f} GB in {seconds:.0f} s")
        for line in bad:
            print(f"  {line}", file=sys.stderr)
        failed |= bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
