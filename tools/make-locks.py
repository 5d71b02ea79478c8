#!/usr/bin/env python3
"""`make locks`: writes every stack's requirements.lock (and cuda/requirements.lock) from
tools/locks.toml, for CPython 3.10-3.13 on Linux x86_64 and aarch64.

For each lock, uv resolves the requirements once for all those interpreters and processors (`uv pip
compile --universal --generate-hashes`, environment markers where a version differs), preferring the
versions the lock pins now. Each pin then keeps the hashes of exactly the files that install on a
covered target (read from the index's file list, and from pip's find-links here), and the lock's
header says which targets it covers and, for the others, which package publishes no file for them.
Beside each lock, `requirements.lock.files` names the file of every hash, so that a test can check
the coverage without the network.

  tools/make-locks.py [--only STACK[/FLAVOUR]] [--extra-index]

Needs uv (`make locks` installs it into build/lock-tools) and the public index. The cpu flavours' CPU
build of torch comes from pip's find-links (this host's settings) or, with --extra-index, from the
flavour's `pip_extra_index` (PyTorch's CPU index), on the targets where either has it.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from suite.base.errors import UsageError  # noqa: E402 (after sys.path is set)
from suite.instack.file_digest import file_digest  # noqa: E402
from suite.stacks.lock_targets import FILES_SUFFIX, Target, files_cover  # noqa: E402
from suite.stacks.locks import LockPin, lock_entries  # noqa: E402

INDEX = "https://pypi.org/simple"
SPEC = ROOT / "tools" / "locks.toml"
MLPERF_NOTE = ("mlperf-logging: its mllog writer and log parser need only the standard library (pandas, pyyaml and "
               "scipy, which it declares, serve its other checkers), so it is installed without them.")


def pin_line(pin: LockPin) -> str:
    """The pin as the lock writes it, its hashes sorted, one a line."""
    marker = f" ; {pin.marker}" if pin.marker else ""
    return f"{pin.name}=={pin.version}{marker} \\\n" + " \\\n".join(
        f"    --hash=sha256:{h}" for h in sorted(pin.hashes))


def uv_binary() -> str:
    found = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        sys.exit("make-locks: uv not found (make locks installs it into build/lock-tools)")
    return found


def pip_find_links() -> list[str]:
    """The local folders of pip's find-links on this host (its own settings): where a build that the
    public index lacks (torch's CPU build) may lie."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    values = re.findall(r"find-links='([^']*)'", out) + os.environ.get("PIP_FIND_LINKS", "").split()
    return sorted({p for v in values for p in v.split() if Path(p).is_dir()})


def compile_with_uv(requirements: list[str], preferences: list[str], *, no_deps: bool, find_links: list[str],
                    extra_index: str) -> list[LockPin]:
    """uv's universal resolution of the requirements, hashes of every file of each chosen version, read as
    the suite reads a lock (suite/stacks/locks.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in.txt").write_text("\n".join(requirements) + "\n")
        (Path(tmp) / "out.txt").write_text("\n".join(preferences) + "\n")  # uv prefers what the output pins
        argv = [uv_binary(), "pip", "compile", "in.txt", "-o", "out.txt", "--universal", "--python-version", "3.10",
                "--generate-hashes", "--no-header", "--no-annotate", "--quiet", "--index-url", INDEX,
                *(["--no-deps"] if no_deps else []), *(f"--find-links={f}" for f in find_links),
                *([f"--extra-index-url={extra_index}", "--index-strategy=unsafe-best-match"] if extra_index else [])]
        done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"make-locks: uv pip compile failed: {done.stderr.strip()}")
        try:
            return lock_entries(Path(tmp) / "out.txt")
        except UsageError as exc:
            sys.exit(f"make-locks: uv pip compile wrote {exc}")


_index_cache: dict[str, dict[str, str]] = {}


def index_files(name: str) -> dict[str, str]:
    """sha256 -> file name of every file the public index has for the project."""
    key = canonicalize_name(name)
    if key not in _index_cache:
        request = urllib.request.Request(f"{INDEX}/{key}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as page:
            files = json.load(page)["files"]
        _index_cache[key] = {f["hashes"]["sha256"]: f["filename"] for f in files if "sha256" in f.get("hashes", {})}
    return _index_cache[key]


def local_files(folders: list[str]) -> dict[str, str]:
    found = {}
    for folder in folders:
        for path in Path(folder).glob("*.whl"):
            found[file_digest(path)] = path.name
    return found


def same_version(filename: str, version: str) -> bool:
    if filename.endswith(".whl"):
        return parse_wheel_filename(filename)[1] == Version(version)
    return True  # an sdist: uv listed it for this version


def narrow(pin: LockPin, targets: list[Target], known: dict[str, str], glibc: str) -> dict[str, str]:
    """hash -> file name of the pin's files that install on a target it applies to; an sdist-only
    pin keeps its sdists (the coverage then names it)."""
    mine = [t for t in targets if pin.applies(t)]
    files = {h: known[h] for h in pin.hashes if h in known and same_version(known[h], pin.version)}
    wheels = {h: f for h, f in files.items() if f.endswith(".whl") and any(files_cover([f], t, glibc) for t in mine)}
    return wheels or {h: f for h, f in files.items() if not f.endswith(".whl")}


def coverage(pins: list[LockPin], files: dict[str, str], targets: list[Target], glibc: str) -> dict[Target, list[str]]:
    """target -> the pins that have no file for it (empty: covered)."""
    missing = {}
    for target in targets:
        missing[target] = [f"{p.name}=={p.version}" for p in pins if p.applies(target)
                           and not files_cover([files[h] for h in p.hashes if h in files], target, glibc)]
    return missing


def comment(text: str) -> list[str]:
    return textwrap.wrap(text, width=110, initial_indent="# ", subsequent_indent="#   ", break_on_hyphens=False)


def header(spec: dict, missing: dict[Target, list[str] | str], glibc: str, cpu_note: str) -> list[str]:
    lines = [f"# {line}".rstrip() for line in spec.get("note", "").strip().splitlines()]
    if any(r.startswith("mlperf-logging") for r in spec.get("no_deps", [])):
        lines += comment(MLPERF_NOTE)
    if cpu_note:
        lines += comment(cpu_note)
    covered = [t.key for t, lacking in missing.items() if not lacking]
    lines.append(f"# covers: {' '.join(covered) or 'nothing'} (CPython on Linux, glibc >= {glibc})")
    for target, lacking in missing.items():
        if isinstance(lacking, str):  # left out by tools/locks.toml, with its reason
            lines.append(f"# not covered: {target.key}: {lacking}")
        elif lacking:
            lines.append(f"# not covered: {target.key}: no file of {', '.join(lacking)} for it")
    lines += comment("Written by `make locks` (tools/make-locks.py from tools/locks.toml: uv pip compile --universal); "
                     f"the file of every hash is named in requirements.lock{FILES_SUFFIX} beside it.")
    return lines


def cpu_requirements(spec: dict, targets: list[Target]) -> tuple[list[str], str]:
    """The requirements with the CPU build of torch on the targets that have it (marker-split from the
    public index's build elsewhere), and the header's line saying so."""
    build = spec.get("cpu_build")
    if not build:
        return list(spec["requirements"]), ""
    cpu = Requirement(build["requirement"])
    where = [t for t in targets if t.key in build["targets"]]
    on_cpu = " or ".join(f"(python_version == '{t.python}' and platform_machine == '{t.machine}')" for t in where)
    elsewhere = " and ".join(f"(python_version != '{t.python}' or platform_machine != '{t.machine}')" for t in where)
    rest = [r for r in spec["requirements"] if canonicalize_name(Requirement(r).name) != canonicalize_name(cpu.name)]
    public = next(r for r in spec["requirements"]
                  if canonicalize_name(Requirement(r).name) == canonicalize_name(cpu.name))
    note = (f"{cpu.name}: its CPU build ({cpu.specifier}) on {', '.join(t.key for t in where)}; on the other targets "
            "the public index's build (CUDA's libraries included, about 3 GB), which runs on the CPU: the CPU builds "
            "for those come only from PyTorch's CPU index, which did not answer where this lock was made (`make "
            "locks EXTRA_INDEX=1` where it answers).")
    return [f"{build['requirement']} ; {on_cpu}", f"{public} ; {elsewhere}", *rest], note


def existing_pins(lock: Path) -> list[str]:
    """`name==version` of every pin of the lock as it is (what uv is to prefer), markers left out."""
    if not lock.exists():
        return []
    try:
        return [f"{pin.name}=={pin.version}" for pin in lock_entries(lock)]
    except UsageError as exc:
        sys.exit(f"make-locks: {exc}")


def make_lock(stack: str, flavour: str, spec: dict, defaults: dict, extra_index: bool) -> dict:
    started = time.monotonic()
    folder = ROOT / "containers" / stack
    description = tomllib.loads((folder / "container.toml").read_text()).get(flavour, {})
    lock = folder / description.get("lock", "requirements.lock")
    glibc = defaults["glibc"]
    targets = [Target(p, m) for m in spec.get("machines", defaults["machines"])
               for p in spec.get("pythons", defaults["pythons"])]
    left_out = {t: spec["not_covered"].get(t.key) or spec["not_covered"].get(t.machine)
                for t in targets if {t.key, t.machine} & set(spec.get("not_covered", {}))}
    targets = [t for t in targets if t not in left_out]
    if extra_index and spec.get("cpu_build"):
        spec = {**spec, "cpu_build": {**spec["cpu_build"], "targets": [t.key for t in targets]}}
    requirements, cpu_note = cpu_requirements(spec, targets)
    find_links = pip_find_links() if spec.get("cpu_build") else []
    extra = description.get("pip_extra_index", "") if extra_index else ""
    preferences = existing_pins(lock)
    pins = compile_with_uv(requirements, preferences, no_deps=False, find_links=find_links,
                           extra_index=extra) if requirements else []
    pins += compile_with_uv(spec.get("no_deps", []), preferences, no_deps=True, find_links=[], extra_index="")
    known = local_files(find_links)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for listing in pool.map(index_files, sorted({p.name for p in pins})):
            known.update(listing)
    files: dict[str, str] = {}
    kept = []
    for pin in pins:
        if any(pin.applies(t) for t in targets):
            chosen = narrow(pin, targets, known, glibc)
            kept.append(replace(pin, hashes=tuple(sorted(set(chosen) or set(pin.hashes)))))
            files.update(chosen)
    missing = coverage(kept, files, targets, glibc) | left_out
    body = "\n".join(pin_line(p) for p in sorted(kept, key=lambda p: (canonicalize_name(p.name), Version(p.version))))
    lock.write_text("\n".join(header(spec, missing, glibc, cpu_note)) + "\n\n" + body + "\n")
    Path(f"{lock}{FILES_SUFFIX}").write_text(
        f"# sha256 and file name of every hash in {lock.name} (written by tools/make-locks.py)\n"
        + "".join(f"{h}  {files[h]}\n" for h in sorted(files, key=lambda h: (files[h], h))))
    return {"lock": str(lock.relative_to(ROOT)), "pins": len(kept), "hashes": sum(len(p.hashes) for p in kept),
            "covers": [t.key for t in targets if not missing[t]],
            "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="STACK or STACK/FLAVOUR")
    parser.add_argument("--extra-index", action="store_true",
                        help="also read the flavours' pip_extra_index (PyTorch's CPU index) for the CPU builds")
    args = parser.parse_args()
    spec = tomllib.loads(SPEC.read_text())
    defaults = {k: spec.pop(k) for k in ("pythons", "machines", "glibc")}
    chosen = [(s, f) for s, flavours in spec.items() for f in flavours
              if args.only in ("", s, f"{s}/{f}")]
    if not chosen:
        sys.exit(f"make-locks: no lock matches --only {args.only!r} (known: {', '.join(spec)})")
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # uv and the index are the wait, not the CPU
        made = pool.map(lambda sf: make_lock(*sf, spec[sf[0]][sf[1]], defaults, args.extra_index), chosen)
    for done in made:
        print(f"{done['lock']}: {done['pins']} pins, {done['hashes']} hashes, covers {' '.join(done['covers'])} "
              f"({done['seconds']:.0f} s)")
    print(f"make-locks: {len(chosen)} locks in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
