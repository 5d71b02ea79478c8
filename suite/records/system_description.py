"""The record's host facts under MLPerf's system-description field names (those mlperf-logging's
system_desc_checker lists), for what the probe knows: the first host of the run stands for all, as
MLPerf describes a system by one node. Fields the suite cannot know (submitter, cooling, storage,
interconnect topology) are left out rather than guessed.

mlperf-sysinfo (PyPI) captures these fields too, but through the mlc-scripts automation (alpha,
pinned to a pre-release, creating its own virtual environments at run time), which is not something
to run on every compute node of a job; the probe's host_info, standard library only, is."""


def system_description(record: dict) -> dict:
    world, versions = record["world"], record["provenance"].get("versions") or {}
    host = next(iter(record["provenance"]["host_info"].values()), {}) or {}
    gpus = host.get("gpus") or []
    framework = ", ".join(f"{name} {version}" for name, version in versions.items()
                          if name in ("torch", "horovod", "mxnet", "tensorflow") and version)
    described = {
        "system_name": world.get("cluster"),
        "number_of_nodes": world["nodes"],
        "host_processor_model_name": host.get("cpu_model"),
        "host_processor_vcpu_count": host.get("logical_cpus"),
        "host_memory_capacity": f"{host['memory_gib']:g} GiB" if host.get("memory_gib") else None,
        "accelerators_per_node": len(gpus) if gpus else 0,
        "accelerator_model_name": gpus[0]["name"] if gpus else None,
        "accelerator_memory_capacity": gpus[0].get("memory") if gpus else None,
        "framework": framework or None,
        "operating_system": host.get("platform"),
    }
    return {k: v for k, v in described.items() if v is not None}
