"""Processes as /proc shows them."""


def alive(pid: int) -> bool:
    """Whether pid is running (not ended, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # ended meanwhile: gone before open, or between open and read (ESRCH)
        return False
