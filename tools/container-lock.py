#!/usr/bin/env python3
"""Writes the hash-pinned lock of a container flavour whose wheels differ from the local stack's
(CUDA builds), without downloading the wheels: `uv pip compile --generate-hashes` resolves from the
registry's metadata, then only the hashes of files that install on the target (CPython X.Y,
manylinux x86_64) are kept, as the registry's simple index names them.

  tools/container-lock.py --python 3.11 --out containers/pytorch-horovod/cuda/requirements.lock \\
      --note "..." -- torch==2.13.0 cmake==4.4.4 ...

Needs `uv` (pip install uv) and the registry (https://pypi.org/simple).
"""

import argparse
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

INDEX = "https://pypi.org/simple"
LINK = re.compile(r'href="[^"]*/([^/"#]+)#sha256=([0-9a-f]{64})"')
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")


def target_tags(python: str) -> set:
    major, minor = (int(x) for x in python.split("."))
    glibc = [f"manylinux_2_{m}_x86_64" for m in range(35, 4, -1)]
    platforms = [*glibc, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    version = (major, minor)
    return {*cpython_tags(version, platforms=platforms), *compatible_tags(version, platforms=platforms)}


def registry_files(name: str) -> dict[str, str]:
    with urllib.request.urlopen(f"{INDEX}/{canonicalize_name(name)}/", timeout=60) as page:
        return {sha: filename for filename, sha in LINK.findall(page.read().decode())}


def keep(filename: str, version: str, tags: set) -> bool:
    if not filename.endswith(".whl"):
        return False
    _, wheel_version, _, wheel_tags = parse_wheel_filename(filename)
    return str(wheel_version) == version and bool(wheel_tags & tags)


def narrow(compiled: str, tags: set) -> list[str]:
    out = []
    for block in re.sub(r"\\\n\s*", " ", compiled).splitlines():
        line = block.split("#", 1)[0].strip()
        if not (pin := PIN.match(line)):
            continue
        name, version = pin.groups()
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        files = registry_files(name)
        wheels = sorted(h for h in hashes if keep(files.get(h, ""), version, tags))
        chosen = wheels or sorted(hashes)  # sdist only: keep what uv gave
        if not wheels:
            print(f"note: {name}=={version} has no wheel for the target; keeping {len(chosen)} hash(es)",
                  file=sys.stderr)
        out.append(f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in chosen))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="target CPython, e.g. 3.11")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--note", default="", help="header comment (what the lock is for)")
    parser.add_argument("--no-deps", action="store_true", help="only the requirements given")
    parser.add_argument("requirements", nargs="+")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in.txt").write_text("\n".join(args.requirements) + "\n")
        compiled = subprocess.run(
            ["uv", "pip", "compile", "in.txt", "--python-version", args.python, "--python-platform",
             "x86_64-manylinux_2_28", "--generate-hashes", "--no-header", "--no-annotate",
             "--index-url", INDEX, *(["--no-deps"] if args.no_deps else [])],
            cwd=tmp, check=True, capture_output=True, text=True).stdout
    header = [f"# {line}".rstrip() for line in args.note.splitlines()]
    header.append(f"# Written by tools/container-lock.py --python {args.python}"
                  f"{' --no-deps' if args.no_deps else ''} (uv pip compile, then only the wheels for CPython "
                  f"{args.python} manylinux x86_64).")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(header) + "\n\n" + "\n".join(narrow(compiled, target_tags(args.python))) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
