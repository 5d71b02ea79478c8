"""Where a stack's packages come from, the same for a local stack, a wheel folder and an image build:
pip with this host's own settings (index, find-links, proxy, CA bundle), plus the flavour's extra index
(PyTorch's CPU wheels) for what those settings lack; or, on a machine without network, a wheel folder
filled beforehand (`make wheels`) and nothing else.

The extra index is named to pip only for the builds the lock pins from it (a local version such as
torch 2.13.0+cpu, for this interpreter) that pip's own settings do not offer (a mirror or find-links
may), and only once pip, with those settings, lists them there: an index that cannot be reached costs
pip its whole timeout for every package, and without the build pip would fetch the public index's
(CUDA) file of the same release and then fail on its hash. Where neither has it, the install stops
before anything is downloaded, saying so."""

import contextlib
import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

# A wheel folder is served to image builds on this port when it is free: the URL is a build argument,
# and the same URL keeps the engine's layer cache valid from one build to the next.
WHEELS_PORT = 38741
REACH_TIMEOUT_S = 10  # pip's own, per connection (with no retries): a dead index costs seconds
# The whole `pip index` run, its start included: only a hung pip meets it; a busy host starts pip slowly.
PIP_RUN_LIMIT_S = 300


@functools.cache
def pip_offers(name: str, version: str, index_url: str = "") -> bool:
    """Whether pip, with this host's own settings (or index_url as its index), lists that version of
    the package for the running interpreter, within a few seconds and without retries."""
    argv = [sys.executable, "-m", "pip", "index", "versions", name, "--pre", "--retries", "0",
            "--timeout", str(REACH_TIMEOUT_S), *(["--index-url", index_url] if index_url else [])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        return False
    listed = re.search(r"^Available versions: (.*)$", done.stdout, flags=re.M)
    return done.returncode == 0 and bool(listed) and version in listed.group(1).split(", ")


def sources(extra_index: str = "", wheels: Path | str | None = None, log=print,
            needs: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """pip options saying where packages come from: the wheel folder alone, or this host's settings
    plus the extra index where `needs` (name, version: builds only the extra index publishes) asks for it."""
    if wheels:
        return ["--no-index", "--find-links", str(Path(wheels).resolve())]
    lacking = [(name, version) for name, version in needs if not pip_offers(name, version)]
    if not lacking:
        return []
    if extra_index and all(pip_offers(name, version, extra_index) for name, version in lacking):
        return ["--extra-index-url", extra_index]
    builds = ", ".join(f"{name}=={version}" for name, version in lacking)
    where = (f"from {extra_index}, which does not list it with this host's pip settings (proxy, certificates, "
             "index)") if extra_index else "from no index this host's pip settings reach"
    raise RuntimeError(f"{builds} comes only {where}; ways on: FLAVOUR=cuda (the public index's build, which "
                       "runs on the CPU too), WHEELS=<a folder `make wheels` filled where that index answers>, or "
                       f"pip's own settings (PIP_EXTRA_INDEX_URL or PIP_FIND_LINKS naming a mirror of it)")


def wheel_env(wheels: Path | str | None) -> dict:
    """For pip run by a build script (post-install.sh downloads an sdist): the wheel folder alone."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(Path(wheels).resolve())} if wheels else {}


def fill(folder: Path, locks: list[tuple[Path, bool]], extra_index: str = "", log=print,
         needs: tuple[tuple[str, str], ...] = ()) -> None:
    """`pip download` of every file of the locks (path, as sdists?) into folder, hash-checked, from
    this host's settings and the extra index (see sources). pip's cache makes a refill cheap."""
    folder.mkdir(parents=True, exist_ok=True)
    where = sources(extra_index, log=log, needs=needs)
    for lock, sdists in locks:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
                *(["--no-binary", ":all:"] if sdists else []), *where, "--dest", str(folder),
                "-r", str(lock)]
        log(f"wheels: pip download -r {lock.parent.name}/{lock.name} into {folder}")
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ))
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
            raise RuntimeError(f"pip download -r {lock} failed with exit {done.returncode}: {tail}")


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.is_file()) / 1e6


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # `format`: the base class's parameter name
        pass


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """The folder over HTTP on 127.0.0.1 while the block runs; yields the URL pip's --find-links takes."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEELS_PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
