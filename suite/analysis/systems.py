"""The report's systems page: one row per cluster, so that figures from several clusters are read beside what
each cluster is. A row holds what the cluster's latest record says of its nodes, under MLPerf's
system-description names (suite/records/system_description.py: the first host standing for all; on GPUs the
driver, CUDA, cuDNN and NCCL), the most nodes its records ran on, the frameworks they trained with, and its
network as its interconnect checks measured it (the check with the most nodes, the latest of those)."""

import html
from collections import defaultdict

from suite.analysis.network_figures import measured_network
from suite.records.read import Point, record_frameworks
from suite.records.system_description import system_description

HEADINGS = ("cluster", "records", "most nodes", "processor", "memory", "accelerators per node", "host networking",
            "network measured", "frameworks", "GPU software", "operating system", "latest")


def described(point: Point) -> dict:
    """The record's system description: as the run wrote it, else made from its host facts (records of
    before it was written, or read through the index, which leaves those out)."""
    kept = point.record["provenance"].get("system_description")
    return kept if kept is not None else system_description(point.full_record())


def system_row(cluster: str, points: list[Point]) -> list[str]:
    """The cells of one cluster's row (HEADINGS), from its records."""
    newest = max(points, key=lambda p: p.finished_at)
    facts = described(newest)
    cpu = facts.get("host_processor_model_name")
    vcpus = facts.get("host_processor_vcpu_count")
    count, model = facts.get("accelerators_per_node"), facts.get("accelerator_model_name")
    memory = facts.get("accelerator_memory_capacity")
    accelerators = f"{count}x {model}" + (f", {memory} each" if memory else "") if count and model else "none"
    network = measured_network([p.record for p in points])
    measured = (f"{network[0]['bandwidth_gbit_s']:.3g} Gbit/s, {network[0]['latency_us']:.3g} us per hop "
                f"({network[1]})" if network else "no interconnect check")
    frameworks = sorted({f"{name} {version}" for p in points for name, version in record_frameworks(p.record)})
    return [cluster, str(len(points)), str(max(p.nodes for p in points)),
            f"{cpu or 'unknown'}" + (f", {vcpus} vCPUs" if vcpus else ""), facts.get("host_memory_capacity") or "-",
            accelerators, facts.get("host_network_card_count") or "-", measured, ", ".join(frameworks) or "-",
            facts.get("other_software_stack") or "-", facts.get("operating_system") or "-", newest.finished_at]


def report_body(points: list[Point]) -> str:
    """The page's table, a row per cluster in name order."""
    by_cluster = defaultdict(list)
    for point in points:
        by_cluster[point.cluster].append(point)
    if not by_cluster:
        return "<p>No records.</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADINGS)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in system_row(name, by_cluster[name]))
                   + "</tr>" for name in sorted(by_cluster))
    return (f"<p>What each cluster is, by its latest record (its first host standing for its nodes), beside its "
            f"network as its interconnect checks measured it.</p><table><tr>{head}</tr>{rows}</table>")
