"""What a run is given: cases (case.toml), cluster profiles, hostfiles, and what the hosts have (GPUs,
which names are this machine)."""
