"""A TensorFlow process's place in a TF_CONFIG cluster (the layout suite/launchers/tfdist.py writes) and the
strategy it trains with, for tf-cifar and the interconnect check alike. Standard library only at import."""


def worker_rank(tf_config: dict | None) -> tuple[int, int]:
    """(rank, workers): the chief is rank 0, worker i is rank i + 1 after a chief; no TF_CONFIG: (0, 1)."""
    if not tf_config:
        return 0, 1
    cluster, task = tf_config["cluster"], tf_config["task"]
    chiefs = len(cluster.get("chief", []))
    workers = chiefs + len(cluster.get("worker", []))
    return (0 if task["type"] == "chief" else task["index"] + chiefs), workers


def make_strategy(multi_worker: bool, per_node: int):
    """(the strategy, its name, the device type and name for the record) of a process as suite/launchers/tfdist.py
    places it: MultiWorkerMirroredStrategy across nodes (one replica per worker on a CPU-only node), else
    MirroredStrategy over the node's `per_node` GPUs, or as many logical devices of its CPU; ValueError where the
    node cannot give it those replicas. TensorFlow is imported here, inside the stack."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < per_node:
            raise ValueError(f"GPUS_PER_NODE={per_node} but this node has {len(gpus)} GPU(s)")
        tf.config.set_visible_devices(gpus[:per_node], "GPU")
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu")
        if multi_worker:
            return tf.distribute.MultiWorkerMirroredStrategy(), "MultiWorkerMirroredStrategy", "cuda", name
        devices = [f"/gpu:{i}" for i in range(per_node)]
        return tf.distribute.MirroredStrategy(devices), "MirroredStrategy", "cuda", name
    if multi_worker:
        if per_node != 1:
            raise ValueError(f"on a CPU-only node MultiWorkerMirroredStrategy runs one replica per worker; "
                             f"GPUS_PER_NODE={per_node} needs GPUs (use GPUS_PER_NODE=1)")
        return tf.distribute.MultiWorkerMirroredStrategy(), "MultiWorkerMirroredStrategy", "cpu", "cpu"
    # Logical devices on the one CPU give MirroredStrategy as many replicas as GPUs would.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * per_node)
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(per_node)]), "MirroredStrategy", "cpu", "cpu"
