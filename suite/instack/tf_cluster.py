"""A TensorFlow process's place in a TF_CONFIG cluster (the layout suite/launchers/tfdist.py writes), for
tf-cifar and the interconnect check alike. Standard library only."""


def worker_rank(tf_config: dict | None) -> tuple[int, int]:
    """(rank, workers): the chief is rank 0, worker i is rank i + 1 after a chief; no TF_CONFIG: (0, 1)."""
    if not tf_config:
        return 0, 1
    cluster, task = tf_config["cluster"], tf_config["task"]
    chiefs = len(cluster.get("chief", []))
    workers = chiefs + len(cluster.get("worker", []))
    return (0 if task["type"] == "chief" else task["index"] + chiefs), workers
