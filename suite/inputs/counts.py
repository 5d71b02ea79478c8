"""Counts as a user types them (NODES, GPUS_PER_NODE, REPEAT, TIMEOUT, --devices): a positive integer, or
a comma-separated list of them for a sweep; anything else is refused in one line."""

from suite.base.errors import UsageError


def positive_int(value: str | int, what: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{what} must be a positive integer, got '{value}'")
    return int(text)


def positive_ints(value: str | int, what: str) -> list[int]:
    """A comma-separated list of positive integers, e.g. NODES=1,2,4; each value once, in order."""
    values = [positive_int(part, what) for part in str(value).split(",")]
    if len(set(values)) != len(values):
        raise UsageError(f"{what} lists a value twice: '{value}'")
    return values
