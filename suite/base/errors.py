"""The runner's two kinds of failure (bad input before launch: exit 2; a launched run that failed: exit 1)
and the reason an interrupted run's record gives."""

class UsageError(Exception):
    """Bad input found before anything is launched: printed as one line, exit status 2."""


class RunFailed(Exception):
    """A launched run did not produce a usable measurement."""


INTERRUPTED = "interrupted (SIGINT/SIGTERM on the runner)"
