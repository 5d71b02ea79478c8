"""A host's network links in the record (the probe's host_info) and as MLPerf's system description names them."""

import copy
import json
import os
from pathlib import Path

from conftest import ROOT

from suite.instack.probe import network_links
from suite.records.schema import problem
from suite.records.system_description import networking, system_description


def sysfs(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    return root


HDR_NODE = {
    "infiniband/mlx5_0/ports/1/rate": "200 Gb/sec (4X HDR)", "infiniband/mlx5_0/ports/1/state": "4: ACTIVE",
    "infiniband/mlx5_0/ports/1/link_layer": "InfiniBand",
    "infiniband/mlx5_1/ports/1/rate": "200 Gb/sec (4X HDR)", "infiniband/mlx5_1/ports/1/state": "4: ACTIVE",
    "infiniband/mlx5_1/ports/1/link_layer": "InfiniBand",
    "infiniband/mlx5_2/ports/1/rate": "100 Gb/sec (4X EDR)", "infiniband/mlx5_2/ports/1/state": "1: DOWN",
    "infiniband/mlx5_2/ports/1/link_layer": "Ethernet",
    "net/ib0/device/vendor": "0x15b3", "net/ib0/type": "32", "net/ib0/speed": "200000", "net/ib0/mtu": "4092",
    "net/ib0/operstate": "up",
    "net/eno1/device/vendor": "0x8086", "net/eno1/type": "1", "net/eno1/speed": "25000", "net/eno1/mtu": "9000",
    "net/eno1/operstate": "up",
    "net/eno2/device/vendor": "0x8086", "net/eno2/type": "1", "net/eno2/speed": "-1", "net/eno2/mtu": "1500",
    "net/eno2/operstate": "down",
    "net/lo/type": "772", "net/lo/mtu": "65536", "net/lo/operstate": "unknown",  # no device: not a link
    "net/docker0/type": "1", "net/docker0/operstate": "down",
}


def test_links_are_read_from_sysfs_ports_and_interfaces_of_devices(tmp_path):
    links = network_links(str(sysfs(tmp_path, HDR_NODE)))
    assert links == [
        {"name": "mlx5_0/1", "type": "InfiniBand", "rate_gbit_s": 200, "state": "ACTIVE"},
        {"name": "mlx5_1/1", "type": "InfiniBand", "rate_gbit_s": 200, "state": "ACTIVE"},
        {"name": "mlx5_2/1", "type": "Ethernet", "rate_gbit_s": 100, "state": "DOWN"},
        {"name": "eno1", "type": "Ethernet", "rate_gbit_s": 25, "mtu": 9000, "state": "up"},
        {"name": "eno2", "type": "Ethernet", "rate_gbit_s": None, "mtu": 1500, "state": "down"},  # speed -1
        {"name": "ib0", "type": "IPoIB", "rate_gbit_s": 200, "mtu": 4092, "state": "up"}]
    assert networking(links) == {"host_networking": "InfiniBand, Ethernet",
                                 "host_network_card_count": "2x 200 Gb/s InfiniBand, 1x 25 Gb/s Ethernet"}
    assert network_links(str(tmp_path / "absent")) == [] and networking([]) == {}


def test_a_link_whose_rate_the_driver_keeps_is_counted_without_one(tmp_path):
    links = network_links(str(sysfs(tmp_path, {"net/eth0/device/vendor": "0x1af4", "net/eth0/type": "1",
                                               "net/eth0/operstate": "up", "net/eth0/mtu": "1400"})))
    assert links == [{"name": "eth0", "type": "Ethernet", "rate_gbit_s": None, "mtu": 1400, "state": "up"}]
    record = {"world": {"nodes": 2, "cluster": "site"}, "provenance": {"host_info": {"n1": {"network": links}}}}
    assert system_description(record)["host_network_card_count"] == "1x Ethernet"


def test_the_schema_holds_each_links_fields_to_their_types(tmp_path):
    path = sorted((ROOT / "reports" / "results").glob("*pytorch-synthetic*.json"))[0]
    record = json.loads(path.read_text())
    host = next(iter(record["provenance"]["host_info"]))
    record["provenance"]["host_info"][host]["network"] = network_links(str(sysfs(tmp_path, HDR_NODE)))
    assert problem(record) is None
    spoken = copy.deepcopy(record)
    spoken["provenance"]["host_info"][host]["network"][0]["rate_gbit_s"] = "200 Gb/sec (4X HDR)"
    assert problem(spoken).startswith(f"not a valid record: provenance/host_info/{host}/network/0/rate_gbit_s: ")
    unnamed = copy.deepcopy(record)
    del unnamed["provenance"]["host_info"][host]["network"][3]["name"]
    assert problem(unnamed) == (f"not a valid record: provenance/host_info/{host}/network/3: 'name' is a required "
                                "property")


def test_this_hosts_links_are_its_interfaces_of_devices_and_its_infiniband_ports():
    net, ib = Path("/sys/class/net"), Path("/sys/class/infiniband")
    ports = [f"{d.name}/{p.name}" for d in sorted(ib.iterdir()) for p in sorted((d / "ports").iterdir())] \
        if ib.is_dir() else []
    interfaces = sorted(n for n in os.listdir(net) if (net / n / "device").exists())
    assert [link["name"] for link in network_links()] == ports + interfaces


def test_the_summary_sets_the_interconnect_check_beside_the_nodes_links():
    from suite.analysis.network_figures import summary_line

    check = {"status": "ok", "implementation": "torch.distributed nccl", "exchange": "ring", "nodes": 2, "ranks": 8,
             "sizes": [{"bytes": 2**20, "busbw_gb_s": 3.1}, {"bytes": 102_228_128, "busbw_gb_s": 88.4}],
             "network": {"bandwidth_gbit_s": 741.25, "latency_us": 8.42}}
    assert summary_line(check, "4x 200 Gb/s InfiniBand") == (
        "interconnect: torch.distributed nccl (ring) over 2 node(s), 8 participants: bus bandwidth 88.4 GB/s at "
        "102.2 MB; 741 Gbit/s and 8.42 us per hop; each node's links: 4x 200 Gb/s InfiniBand")
    assert summary_line({"status": "not available", "reason": "one rank: nothing to all-reduce with"}) == \
        "interconnect check: not available: one rank: nothing to all-reduce with"


def test_doctor_names_this_machines_links_for_a_porter_to_choose_from(tmp_path, capsys):
    from suite.execution.doctor import doctor, links_text

    assert links_text(network_links(str(sysfs(tmp_path, HDR_NODE)))) == (
        "mlx5_0/1 InfiniBand 200 Gb/s ACTIVE, mlx5_1/1 InfiniBand 200 Gb/s ACTIVE, mlx5_2/1 Ethernet 100 Gb/s DOWN, "
        "eno1 Ethernet 25 Gb/s up, eno2 Ethernet down, ib0 IPoIB 200 Gb/s up")
    assert links_text([]) == "none with a device (lo, bridges and virtual ones aside)"
    doctor(None, ["pytorch-ddp"])
    assert f"network links of this machine: {links_text(network_links())}" in capsys.readouterr().out.splitlines()
