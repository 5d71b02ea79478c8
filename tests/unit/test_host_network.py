"""Server ports of a run: free here, below the kernel's ephemeral range (where no outgoing connection,
and no client dialling the port itself, can take them before the server binds)."""

import socket

import pytest

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
