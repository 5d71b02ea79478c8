"""What a cluster profile needs on this machine and whether it is there, one line each (`ok:`, `missing:`, or
`optional:` for data that only an option reads): the scheduler's commands, the GPUs, the runtime (container
tool and images, or local stacks), the cases' data, that the hosts can be reached, and that this machine has the
network interfaces and InfiniBand devices the environment names where the hosts are this machine
(`suite doctor`).
Nothing is installed or started."""

import os
import re
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.execution.clusters import Cluster, interface_settings, load_cluster
from suite.execution.console import nccl_files_text
from suite.inputs.cases import known_cases, load_case
from suite.inputs.host_gpus import GpuProbeError, host_gpus, pick_flavour
from suite.inputs.host_network import INTERFACES_SCRIPT, host_lacks
from suite.instack.case_options import evaluate
from suite.instack.probe import nccl_conf, network_links


def doctor(cluster_name: str | None, case_names: list[str] | None = None, flavour: str | None = None) -> int:
    """Prints the profile's lines (for `case_names`, else every case); 1 when anything a default run needs
    is missing, else 0."""
    cluster = load_cluster(cluster_name) if cluster_name else Cluster("localhost", paths.HOSTFILES / "localhost")
    cases = [load_case(name) for name in (case_names or known_cases())]
    print(f"cluster {cluster.name}: scheduler {cluster.scheduler}, runtime {cluster.runtime}"
          f"{' (an example profile: adapt it first)' if cluster.example else ''}")
    if cluster.env:
        print("environment of every process (the profile's [env]): "
              + " ".join(f"{name}={value}" for name, value in sorted(cluster.env.items())))
    print(f"network links of this machine: {links_text(network_links())}")
    print(f"NCCL's files on this machine: {nccl_files_text(nccl_conf())}")  # a fact, as the links
    stacks = sorted({case.stack for case in cases})
    lines = [*plugin_lines("schedulers", cluster.scheduler, cluster), gpu_line(flavour), *interface_lines(cluster),
             *plugin_lines("runtimes", cluster.runtime, cluster, stacks, flavour), *data_lines(cluster, cases)]
    for line in lines:
        print(line)
    return 1 if any(line.startswith("missing:") for line in lines) else 0


def gpu_line(flavour: str | None) -> str:
    try:
        gpus = host_gpus()
    except GpuProbeError as exc:
        return f"missing: {exc}"
    chosen = pick_flavour(flavour, gpus)
    how = "as asked (FLAVOUR)" if flavour else "for this host"
    return f"ok: {gpus} NVIDIA GPU(s) here (nvidia-smi -L); stacks in their {chosen} flavour {how}"


def links_text(links: list[dict]) -> str:
    """The links in a line, for choosing what NCCL_SOCKET_IFNAME, NCCL_IB_HCA ... name: e.g. `mlx5_0/1 InfiniBand
    200 Gb/s ACTIVE, eno1 Ethernet 25 Gb/s up`."""
    words = [" ".join(str(w) for w in (link["name"], link.get("type"), link.get("rate_gbit_s") and
                                       f"{link['rate_gbit_s']:g} Gb/s", link.get("state")) if w) for link in links]
    return ", ".join(words) or "none with a device (lo, bridges and virtual ones aside)"


def interface_lines(cluster: Cluster) -> list[str]:
    """Where the hosts are this machine (scheduler local): a line per variable naming the processes' network
    interfaces or InfiniBand devices, against this machine's. Other schedulers' hosts are checked by the run
    itself, by the probe on each host before launch."""
    settings = interface_settings(cluster, os.environ)
    if cluster.scheduler != "local" or not settings:
        return []
    probe = plugins.output_here(("sh", "-c", INTERFACES_SCRIPT)) or ""
    lines = []
    for variable, (value, whence) in settings.items():
        missing, devices = host_lacks(variable, value, probe)
        if missing:
            lines.append(f"missing: {variable}={value} ({whence}): this machine {missing}")
        elif devices is None:
            lines.append(f"not checked: {variable}={value} ({whence}): this machine's devices could not be listed")
        else:
            lines.append(f"ok: {variable}={value} ({whence}): this machine has what it names")
    return lines


def plugin_lines(kind: str, name: str, *args) -> list[str]:
    try:
        plugin = plugins.load(kind, name)
    except UsageError as exc:
        return [f"missing: {exc}"]
    return plugin.doctor_lines(*args)


def data_lines(cluster: Cluster, cases: list) -> list[str]:
    """A line per case that reads files: `missing:` (a failure) only where the case's default run needs
    them; data that only an option asks for (--data tokens) is `optional:`."""
    data_dir = Path(cluster.data_dir or paths.data_dir())
    lines = []
    for case in cases:
        required = case.spec.get("data", {}).get("requires", [])
        if not required:
            continue
        missing = [rel for rel in required if not (data_dir / rel).exists()]
        status, needed_for = data_need(case)
        lines.append(f"ok: data of {case.name}{needed_for} under {data_dir}" if not missing else
                     f"{status}: data of {case.name}{needed_for} under {data_dir}: {missing[0]}"
                     f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''} "
                     f"({case.make_data_commands})")
    return lines


def data_need(case) -> tuple[str, str]:
    """Whether the case's default run reads its data ("missing", "") or only an option does ("optional",
    " for --data tokens")."""
    data = case.spec["data"]
    defaults = case.parse_options([])
    if data.get("unless_option") and defaults.get(data["unless_option"]):
        return "optional", f" without --{data['unless_option']}"
    when = data.get("when")
    if when is None or evaluate(when, {k.replace("-", "_"): v for k, v in defaults.items()}):
        return "missing", ""
    if plain := re.fullmatch(r"(\w+) == '([^']*)'", when):
        return "optional", f" for --{plain[1].replace('_', '-')} {plain[2]}"
    return "optional", f" where {when}"
