"""What a run is given: cases (case.toml), hostfiles, counts as typed (NODES, REPEAT), and what the hosts
have (GPUs, network interfaces and InfiniBand devices, which names are this machine). Cluster profiles are
read by suite/execution/clusters.py, where the plugins' settings they carry are known."""
