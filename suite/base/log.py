"""The runner's own progress lines."""


def log(message: str) -> None:
    """A line of the runner's own progress (stdout, beside the processes' output)."""
    print(f"suite: {message}", flush=True)
