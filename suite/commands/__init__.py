"""One module per command of `python -m suite`: its arguments beside its run."""
