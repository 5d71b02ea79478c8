"""The record's host facts under MLPerf's system-description field names (those mlperf-logging's
system_desc_checker lists), for what the probe knows: the first host of the run stands for all, as
MLPerf describes a system by one node; its network links as host_networking and host_network_card_count.
Fields the suite cannot know (submitter, cooling, storage, interconnect topology) are left out rather than
guessed.

mlperf-sysinfo (PyPI) captures these fields too, but through the mlc-scripts automation (alpha,
pinned to a pre-release, creating its own virtual environments at run time), which is not something
to run on every compute node of a job; the probe's host_info, standard library only, is."""

from suite.records.read import FRAMEWORKS, first_host_info


def system_description(record: dict) -> dict:
    world, versions = record["world"], record["provenance"].get("versions") or {}
    host = first_host_info(record)
    gpus = host.get("gpus") or []
    # in FRAMEWORKS' order (a framework before the library that exchanges its gradients), whatever the versions'
    framework = ", ".join(f"{name} {versions[name]}" for name in FRAMEWORKS if versions.get(name))
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
        "other_software_stack": software_stack(versions, gpus),
        "operating_system": host.get("platform"),
        **networking(host.get("network") or []),
    }
    return {k: v for k, v in described.items() if v is not None}


# Beside the framework, what moves a GPU run's figures (MLPerf's other_software_stack: driver, CUDA, cuDNN, NCCL).
SOFTWARE = (("cuda", "CUDA"), ("hip", "HIP"), ("cudnn", "cuDNN"), ("nccl", "NCCL"))


def software_stack(versions: dict, gpus: list[dict]) -> str | None:
    """The GPU driver of the first host's first GPU and the versions the case reported of CUDA, HIP, cuDNN and
    NCCL, e.g. "driver 580.159, CUDA 13.0, cuDNN 91002, NCCL 2.27.7"; None on a CPU run, which has none."""
    driver = [f"driver {gpus[0]['driver']}"] if gpus and gpus[0].get("driver") else []
    parts = driver + [f"{name} {versions[key]}" for key, name in SOFTWARE if versions.get(key)]
    return ", ".join(parts) or None


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


# What of two records' systems a reader needs beside a rerun's verdict (the name and the node count are the run's
# own choice, not the system's).
COMPARED = ("host_processor_model_name", "host_processor_vcpu_count", "host_memory_capacity", "accelerators_per_node",
            "accelerator_model_name", "accelerator_memory_capacity", "host_network_card_count", "framework",
            "other_software_stack", "operating_system")


def system_differences(was: dict, now: dict) -> list[str]:
    """`field: A's value -> B's` for each COMPARED field of two system descriptions that differs, where
    both say it (an older record that does not is not a difference)."""
    return [f"{key}: {was[key]} -> {now[key]}" for key in COMPARED
            if key in was and key in now and _same_form(key, was[key]) != _same_form(key, now[key])]


def _same_form(key: str, value):
    """The framework field as a set: records written before its order was fixed list it in any order."""
    return frozenset(value.split(", ")) if key == "framework" and isinstance(value, str) else value
