"""Launchers: which processes a case needs on which hosts, with which environment (torchrun, horovodrun,
ps-lite, TF_CONFIG, one process per rank), one module each, found by name (the contract:
suite/execution/plugins.py, Launcher)."""
