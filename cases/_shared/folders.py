"""A data script's output folder, made beside its final place and swapped in at the end, so that a failure
leaves no half set. Standard library only: the data scripts of every stack import it, whatever else the
stack holds (pytorch-gpt's token file is written in the jax stack too)."""

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def swapped_in(out: Path) -> Iterator[Path]:
    """A folder beside `out` to fill; it replaces `out` only when the block ends without an error,
    so a failure leaves no half set."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
