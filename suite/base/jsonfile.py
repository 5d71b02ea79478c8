"""JSON files written atomically: a reader sees the old file or the whole new one (records, tables, indexes)."""

import json
import os
from pathlib import Path


def write_json_atomic(path: Path, data: dict, overwrite: bool = True) -> None:
    """Readers see the old file or the whole new one, never a part; with overwrite=False an existing
    file is left as it was and FileExistsError is raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
