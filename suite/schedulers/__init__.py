"""Schedulers: how a plan's processes start (here, over ssh, as SLURM steps or a batch job), one module each,
found by name (the contract: suite/execution/plugins.py, Scheduler)."""
