"""Where a stack's packages come from, the same for a local stack, a wheel folder and an image build:
pip with this host's own settings (index, find-links, CA bundle), plus the flavour's extra index
(PyTorch's CPU wheels) for what those settings lack; or, on a machine without network, a wheel folder
filled beforehand (`make wheels`) and nothing else.

The extra index is named to pip only when it answers: an index that cannot be reached costs pip its
whole timeout for every package (air-gapped clusters, build hosts behind a proxy). Where it answers,
pip sees both, and the lock's hashes pick the file (torch 2.13.0+cpu, a higher version than
PyPI's CUDA 2.13.0, is the one the cpu lock pins)."""

import contextlib
import functools
import http.server
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

# A wheel folder is served to image builds on this port when it is free: the URL is a build argument,
# and the same URL keeps the engine's layer cache valid from one build to the next.
WHEELS_PORT = 38741
REACH_TIMEOUT_S = 10


@functools.lru_cache(maxsize=None)
def answers(url: str) -> bool:
    """Whether an index URL answers at all (any HTTP status counts), within a few seconds."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=REACH_TIMEOUT_S).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def sources(extra_index: str = "", wheels: Path | str | None = None, log=print) -> list[str]:
    """pip options saying where packages come from: the wheel folder alone, or this host's settings
    plus the extra index where it answers."""
    if wheels:
        return ["--no-index", "--find-links", str(Path(wheels).resolve())]
    if not extra_index:
        return []
    if answers(extra_index):
        return ["--extra-index-url", extra_index]
    log(f"note: {extra_index} does not answer from here; pip uses this host's own settings only")
    return []


def wheel_env(wheels: Path | str | None) -> dict:
    """For pip run by a build script (post-install.sh downloads an sdist): the wheel folder alone."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(Path(wheels).resolve())} if wheels else {}


def fill(folder: Path, locks: list[tuple[Path, bool]], extra_index: str = "", log=print) -> None:
    """`pip download` of every file of the locks (path, as sdists?) into folder, hash-checked, from
    this host's settings and the extra index. pip's cache makes a refill cheap."""
    folder.mkdir(parents=True, exist_ok=True)
    for lock, sdists in locks:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
                *(["--no-binary", ":all:"] if sdists else []), *sources(extra_index, log=log), "--dest", str(folder),
                "-r", str(lock)]
        log(f"wheels: pip download -r {lock.parent.name}/{lock.name} into {folder}")
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ))
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
            raise RuntimeError(f"pip download -r {lock} failed with exit {done.returncode}: {tail}")


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.is_file()) / 1e6


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
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
