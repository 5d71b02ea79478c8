"""What a record says about the suite that made it: its command line, version, Python, user, the
environment variables that steer frameworks (suite/base/env_policy.py's policy) and the git checkout, with a
hash of its uncommitted changes so a rerun can tell an identical dirty checkout from another."""

import hashlib
import os
import subprocess
import sys

from suite import __version__
from suite.base import paths
from suite.base.env_policy import recorded_env


def git_state() -> dict:
    """The checkout's commit and uncommitted changes; all None where git is missing or this is no checkout
    (a compute node's image, a copied tree)."""
    def git(*args) -> bytes | None:
        try:
            out = subprocess.run(["git", "-C", str(paths.ROOT), *args], capture_output=True)
        except OSError:
            return None
        return out.stdout if out.returncode == 0 else None

    commit = (git("rev-parse", "HEAD") or b"").decode().strip() or None
    dirty = (git("status", "--porcelain", "--untracked-files=no") or b"").strip() if commit else b""
    diff = git("diff", "HEAD", "--binary") if dirty else None
    return {"git_commit": commit, "git_dirty": bool(dirty) if commit else None,
            "git_diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None}


def suite_provenance(argv: list[str]) -> dict:
    return {"argv": argv, "suite_version": __version__, "runner_python": sys.version.split()[0],
            "user": os.environ.get("USER"), "environment": recorded_env(os.environ), **git_state()}
