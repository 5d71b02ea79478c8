"""A file's hex digest, read in chunks of a MiB (hashlib.file_digest is Python 3.11's; stacks may run 3.10):
archives checked against their published sums, image tarballs and images identified by their sha256."""

import hashlib
from pathlib import Path


def file_digest(path: str | Path, algorithm: str = "sha256") -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
