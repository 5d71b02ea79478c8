"""Server ports of a run: free here, below the kernel's ephemeral range (where no outgoing connection,
and no client dialling the port itself, can take them before the server binds); the interfaces each host
has against the variables that name them."""

import socket
import subprocess
from pathlib import Path

import pytest

from suite.base.errors import UsageError
from suite.inputs import host_network
from suite.inputs.host_network import EPHEMERAL_RANGE, free_port, server_port_range


def test_server_ports_lie_just_below_the_ephemeral_range(tmp_path):
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("32768\t60999\n")
    assert server_port_range(ephemeral) == range(32768 - host_network.SERVER_PORTS, 32768)
    ephemeral.write_text("5000 65000\n")
    assert server_port_range(ephemeral) == range(1024, 5000)
    ephemeral.write_text("1024 65000\n")
    assert not server_port_range(ephemeral)
    assert server_port_range(tmp_path / "absent") == range(32768 - host_network.SERVER_PORTS, 32768)


@pytest.mark.skipif(not EPHEMERAL_RANGE.exists(), reason="no /proc/sys/net/ipv4/ip_local_port_range")
def test_a_free_port_is_outside_this_hosts_ephemeral_range_and_bindable():
    low, high = map(int, EPHEMERAL_RANGE.read_text().split())
    ports = {free_port() for _ in range(20)}
    assert all(not low <= p <= high and p >= 1024 for p in ports)
    assert len(ports) > 1  # drawn at random: runs started together pick different ones
    with socket.socket() as sock:
        sock.bind(("", ports.pop()))


def test_a_port_in_use_or_taken_is_passed_over(monkeypatch):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        in_use = held.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("", 0))
            spare = probe.getsockname()[1]
        taken = in_use + 1 if in_use + 1 != spare else in_use + 2
        monkeypatch.setattr(host_network, "server_port_range", lambda: [in_use, taken, spare])
        assert {free_port({taken}) for _ in range(10)} == {spare}  # every port of the range is tried
        monkeypatch.setattr(host_network, "server_port_range", lambda: [in_use, taken])
        with pytest.raises(OSError, match=f"no free TCP port in {in_use}-{taken}"):
            free_port({taken})


def test_without_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(host_network, "server_port_range", lambda: range(0))
    assert free_port() >= 1024


IFACES = ["eno1", "hsn0", "hsn1", "ib0", "lo"]


@pytest.mark.parametrize("value, matched", [
    ("hsn", ["hsn0", "hsn1"]), ("ib,eno", ["eno1", "ib0"]), ("=hsn", []), ("=hsn0,=lo", ["hsn0"]),
    ("=hsn0,lo", ["hsn0", "lo"]), ("^hsn,lo", ["eno1", "ib0"]), ("^=hsn", IFACES),
    ("^=hsn0", ["eno1", "hsn1", "ib0", "lo"]),
    ("hsn0:5000", ["hsn0"]), ("eth", []), ("^e,h,i,l", []),
])
def test_nccl_socket_ifname_is_read_as_nccl_reads_it(value, matched):
    """Prefixes; `=` exact names (the whole list); `^` all but those; a `:port` after a name."""
    assert sorted(host_network.nccl_matches(value, IFACES)) == matched


@pytest.mark.parametrize("variable, value, missing", [
    ("NCCL_SOCKET_IFNAME", "hsn", None), ("NCCL_SOCKET_IFNAME", "ib0,ib1", None),
    ("NCCL_SOCKET_IFNAME", "eth", "has no interface it matches"),
    ("GLOO_SOCKET_IFNAME", "hsn0,hsn1", None), ("GLOO_SOCKET_IFNAME", "hsn0, eth0", "has no interface eth0"),
    ("GLOO_SOCKET_IFNAME", "hsn", "has no interface hsn"),  # Gloo takes names, not prefixes
    ("HOROVOD_GLOO_IFACE", "ib0", None), ("HOROVOD_GLOO_IFACE", "ib1", "has no interface ib1"),
    ("DMLC_INTERFACE", "eno1", None), ("DMLC_INTERFACE", "eno", "has no interface eno"),
])
def test_each_variable_names_interfaces_its_own_way(variable, value, missing):
    said = host_network.interfaces_missing(variable, value, IFACES)
    assert said == (missing and f"{missing} (its interfaces: eno1, hsn0, hsn1, ib0, lo)")
    assert host_network.interfaces_missing(variable, value, []) == "has no interface at all"


def probe_output(interfaces: list[str]) -> str:
    return f"GPU 0: x\nnvidia-smi exit=0\nnet interfaces={','.join(interfaces)},\nib devices=\n"


def test_a_host_without_the_named_interface_is_refused_naming_it_and_what_it_has():
    settings = {"NCCL_SOCKET_IFNAME": ("hsn", "[env] of cluster profile alps")}
    outputs = {"nid001": probe_output(IFACES), "nid002": probe_output(["eno1", "lo"]), "nid003": None}
    with pytest.raises(UsageError) as refused:
        host_network.refuse_missing_interfaces(settings, outputs)
    assert str(refused.value) == ("NCCL_SOCKET_IFNAME=hsn ([env] of cluster profile alps): host nid002 has no "
                                  "interface it matches (its interfaces: eno1, lo), so its processes would find no "
                                  "socket to use: name one of these, or leave it unset")
    host_network.refuse_missing_interfaces(settings, {"nid001": probe_output(IFACES), "nid003": None,
                                                      "old": "nvidia-smi exit=0\n"})  # not probed: nothing to say


def test_the_probe_lists_this_hosts_interfaces():
    done = subprocess.run(["sh", "-c", host_network.INTERFACES_SCRIPT], capture_output=True, text=True, timeout=30)
    assert sorted(host_network.devices_from_probe(done.stdout)) == sorted(n for _, n in socket.if_nameindex())


def test_an_ib_hca_no_device_of_a_host_matches_is_refused_as_a_run_that_would_measure_sockets():
    settings = {"NCCL_IB_HCA": ("mlx5_0:1,mlx5_1:1", "the run's environment")}
    with_ib = "net interfaces=eth0,ib0,lo,\nib devices=mlx5_0,mlx5_1,\n"
    host_network.refuse_missing_interfaces(settings, {"gpu01": with_ib, "old": "net interfaces=eth0,lo,\n"})
    for devices, lacks, fix in (
            ("mlx5_2,mlx5_3,", "InfiniBand device it matches (its InfiniBand devices: mlx5_2, mlx5_3)",
             "name one of these, or leave it unset"),
            ("", "InfiniBand device at all", "leave it unset there")):
        without = f"net interfaces=eth0,lo,\nib devices={devices}\n"
        with pytest.raises(UsageError) as refused:
            host_network.refuse_missing_interfaces(settings, {"gpu01": with_ib, "gpu02": without})
        assert str(refused.value) == (f"NCCL_IB_HCA=mlx5_0:1,mlx5_1:1 (the run's environment): host gpu02 has no "
                                      f"{lacks}, so NCCL would fall back to its sockets and the run would measure "
                                      f"those: {fix}")


def test_the_probe_lists_this_hosts_infiniband_devices():
    done = subprocess.run(["sh", "-c", host_network.INTERFACES_SCRIPT], capture_output=True, text=True, timeout=30)
    ib = Path("/sys/class/infiniband")
    assert host_network.devices_from_probe(done.stdout, "ib") == (sorted(p.name for p in ib.iterdir())
                                                                  if ib.is_dir() else [])


def test_nccl_net_ib_needs_an_infiniband_device_and_sockets_or_a_plugins_network_nothing_of_them():
    assert host_network.interfaces_missing("NCCL_NET", "IB", ["mlx5_0"]) is None
    assert host_network.interfaces_missing("NCCL_NET", "ib", []) == "has no InfiniBand device at all"
    for value in ("Socket", "AWS Libfabric"):
        assert host_network.interfaces_missing("NCCL_NET", value, []) is None
    settings = {"NCCL_NET": ("IB", "[env] of cluster profile site")}
    with_ib, without = "net interfaces=eth0,ib0,lo,\nib devices=mlx5_0,\n", "net interfaces=eth0,lo,\nib devices=\n"
    host_network.refuse_missing_interfaces(settings, {"gpu01": with_ib})
    host_network.refuse_missing_interfaces({"NCCL_NET": ("Socket", "x")}, {"gpu02": without})
    with pytest.raises(UsageError) as refused:
        host_network.refuse_missing_interfaces(settings, {"gpu01": with_ib, "gpu02": without})
    assert str(refused.value) == ("NCCL_NET=IB ([env] of cluster profile site): host gpu02 has no InfiniBand device "
                                  "at all, so NCCL would find no network IB and its communicator would fail to "
                                  "start: leave it unset there")


@pytest.mark.parametrize("value, missing", [
    ("mlx5_0:1", None), ("mlx5_2:1,mlx5_0:1", None), ("ib0", None), ("all", None), ("^mlx5_0:1", None),
    ("mlx5_2:1", "has none of the network devices it names"),
    ("eth0,mlx5_3:1", "has none of the network devices it names"),
])
def test_ucx_net_devices_needs_one_of_its_ports_or_interfaces(value, missing):
    """UCX warns of each device absent and fails only where none is there; `all` and `^` exclusions pass."""
    probe = "net interfaces=eno1,ib0,lo,\nib devices=mlx5_0,mlx5_1,\n"
    devices = host_network.devices_from_probe(probe, "both")
    assert devices == ["eno1", "ib0", "lo", "mlx5_0", "mlx5_1"]
    said = host_network.interfaces_missing("UCX_NET_DEVICES", value, devices)
    assert said == (missing and f"{missing} (its network devices: eno1, ib0, lo, mlx5_0, mlx5_1)")
    assert host_network.devices_from_probe("ib devices=mlx5_0,\n", "both") is None  # interfaces unread: not probed


FABRIC_PROBE = "net interfaces=eno1,hsn0,lo,\nib devices=mlx5_0,rdmap0s6,\nefa devices=rdmap0s6,\ncxi devices=\n"


LACKS = "has no device of the libfabric providers it names"


@pytest.mark.parametrize("value, missing, on_a_bare_host", [
    ("verbs", None, True), ("verbs;ofi_rxm", None, True), ("efa", None, True), ("cxi,verbs", None, True),
    ("cxi,tcp", None, False), ("tcp", None, False), ("^cxi", None, False), ("shm", None, False),
    ("psm3", None, False), ("cxi", LACKS, True), ("CXI", LACKS, True),
])
def test_fi_provider_needs_the_device_of_one_provider_it_names(value, missing, on_a_bare_host):
    """verbs runs on an RDMA device EFA's driver does not run, efa on one it runs, cxi on a Slingshot NIC; tcp, shm
    and providers not looked for need nothing; a layered `verbs;ofi_rxm` is verbs; `^` exclusions pass."""
    devices = host_network.devices_from_probe(FABRIC_PROBE, "fabric")
    assert devices == ["verbs:mlx5_0", "efa:rdmap0s6"]
    said = host_network.interfaces_missing("FI_PROVIDER", value, devices)
    assert said == (missing and f"{missing} (its fabric devices: efa:rdmap0s6, verbs:mlx5_0)")
    bare = host_network.devices_from_probe("net interfaces=eth0,lo,\nib devices=\n", "fabric")
    assert bare == []
    said = host_network.interfaces_missing("FI_PROVIDER", value, bare)
    assert said == ("has no fabric device at all" if on_a_bare_host else None)
    assert host_network.devices_from_probe("net interfaces=eth0,lo,\n", "fabric") is None  # not probed


def test_an_fi_provider_no_host_serves_is_refused_naming_the_host_and_its_devices():
    settings = {"FI_PROVIDER": ("cxi", "[env] of cluster profile alps")}
    slingshot = "net interfaces=hsn0,lo,\nib devices=\nefa devices=\ncxi devices=cxi0,cxi1,\n"
    host_network.refuse_missing_interfaces(settings, {"nid001": slingshot, "old": "net interfaces=lo,\n"})
    with pytest.raises(UsageError) as refused:
        host_network.refuse_missing_interfaces(settings, {"nid001": slingshot, "gpu01": FABRIC_PROBE})
    assert str(refused.value) == (
        "FI_PROVIDER=cxi ([env] of cluster profile alps): host gpu01 has no device of the libfabric providers it "
        "names (its fabric devices: efa:rdmap0s6, verbs:mlx5_0), so libfabric would offer none of them: MPI over "
        "libfabric would not start, and NCCL's OFI plugin would fail or leave NCCL on its sockets: name one of "
        "these, or leave it unset")


def test_the_probe_tells_each_fabric_device_by_its_driver(tmp_path):
    """The probe's own script on a sysfs-like tree: an RDMA device of EFA's driver is efa's, another verbs', a
    Slingshot NIC cxi's."""
    for device, driver in (("mlx5_0", "mlx5_core"), ("rdmap0s6", "efa")):
        (tmp_path / "drivers" / driver).mkdir(parents=True)
        (tmp_path / "infiniband" / device / "device").mkdir(parents=True)
        (tmp_path / "infiniband" / device / "device" / "driver").symlink_to(tmp_path / "drivers" / driver)
    (tmp_path / "cxi" / "cxi0").mkdir(parents=True)
    script = host_network.INTERFACES_SCRIPT.replace("/sys/class", str(tmp_path))
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert host_network.devices_from_probe(done.stdout, "fabric") == ["verbs:mlx5_0", "efa:rdmap0s6", "cxi:cxi0"]


def test_the_probe_lists_this_hosts_fabric_devices():
    done = subprocess.run(["sh", "-c", host_network.INTERFACES_SCRIPT], capture_output=True, text=True, timeout=30)
    listed = [Path("/sys/class", kind) for kind in ("infiniband", "cxi")]
    here = sorted(p.name for folder in listed if folder.is_dir() for p in folder.iterdir())
    assert sorted(d.split(":")[1] for d in host_network.devices_from_probe(done.stdout, "fabric")) == here


@pytest.mark.parametrize("value, passes_without_ib", [
    ("rc,sm,self", True), ("tcp,self", True), ("^rc", True), ("sm,self,cuda_copy", True),
    ("rc_x", False), ("dc_mlx5,ud_verbs", False), ("ib", False), ("RC", False),
])
def test_ucx_tls_needs_an_infiniband_device_for_its_infiniband_transports_alone(value, passes_without_ib):
    """UCX's rc, ud and dc (and their _verbs/_mlx5 forms) run on an RDMA device EFA's driver does not run; a list
    with tcp, shared memory or the GPUs' transports needs nothing of the fabric."""
    with_ib = host_network.devices_from_probe(FABRIC_PROBE, "fabric")
    assert host_network.interfaces_missing("UCX_TLS", value, with_ib) is None
    said = host_network.interfaces_missing("UCX_TLS", value, ["efa:rdmap0s6"])
    lacks = "has no device of the UCX transports it names (its fabric devices: efa:rdmap0s6)"
    assert said == (None if passes_without_ib else lacks)
    said = host_network.interfaces_missing("UCX_TLS", value, [])
    assert said == (None if passes_without_ib else "has no fabric device at all")
