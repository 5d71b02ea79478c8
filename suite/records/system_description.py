"""The record's host facts under MLPerf's system-description field names (those mlperf-logging's
system_desc_checker lists), for what the probe knows: the first host of the run stands for all, as
MLPerf describes a system by one node; its network links as host_networking and host_network_card_count.
Fields the suite cannot know (submitter, cooling, storage, interconnect topology) are left out rather than
guessed.

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
        **networking(host.get("network") or []),
    }
    return {k: v for k, v in described.items() if v is not None}


UP = {"ACTIVE", "up", "unknown"}  # an IB port's state; an interface's operstate (unknown: a driver that keeps none)


def networking(links: list[dict]) -> dict:
    """host_networking (the kinds of link, e.g. "InfiniBand, Ethernet") and host_network_card_count (e.g.
    "4x 200 Gb/s InfiniBand, 1x 25 Gb/s Ethernet") of the links that are up; an IPoIB interface is an
    InfiniBand port's other face, counted once, as its port."""
    counted: dict[tuple, int] = {}
    for link in links:
        if link.get("state") in UP and link.get("type") != "IPoIB":
            key = (link.get("type") or "unknown", link.get("rate_gbit_s"))
            counted[key] = counted.get(key, 0) + 1
    if not counted:
        return {}
    kinds = list(dict.fromkeys(kind for kind, _ in counted))
    cards = [f"{count}x {f'{rate:g} Gb/s ' if rate else ''}{kind}" for (kind, rate), count in counted.items()]
    return {"host_networking": ", ".join(kinds), "host_network_card_count": ", ".join(cards)}
