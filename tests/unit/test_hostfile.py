import pytest

from suite.base.errors import UsageError
from suite.inputs.counts import positive_int
from suite.inputs.hostfiles import Host, parse_hostfile, read_hostfile, select_world


def test_openmpi_mpich_plain_comments_and_blank_lines():
    text = """
# cluster A
node01 slots=4   # four GPUs
node02:2

node-03.example.org max_slots=8 slots=3
node04
"""
    assert parse_hostfile(text, "hf") == [
        Host("node01", 4), Host("node02", 2), Host("node-03.example.org", 3), Host("node04", 1)]


def test_shipped_localhost_hostfile():
    assert read_hostfile("hostfiles/localhost") == [Host("localhost", 1)]


@pytest.mark.parametrize("line, message", [
    ("node01 slots=abc", "hf:2: bad slot count 'abc'"),
    ("node01 slots=0", "hf:2: bad slot count '0'"),
    ("node01:-1", "hf:2: bad slot count '-1'"),
    ("node01:", "hf:2: bad slot count ''"),
    ("node01 gpus=4", "hf:2: cannot parse 'node01 gpus=4'"),
    ("node01 slots", "hf:2: cannot parse 'node01 slots'"),
    ("a;rm -rf /", "hf:2: cannot parse"),
    ("a;rm", "hf:2: 'a;rm' is not a valid host name"),
    ("$(id)", "hf:2: '$(id)' is not a valid host name"),
    ("`x` slots=1", "hf:2: '`x`' is not a valid host name"),
    ("first", "hf:2: host 'first' is listed again (first on line 1)"),
])
def test_malformed_lines_name_the_line(line, message):
    with pytest.raises(UsageError) as err:
        parse_hostfile(f"first slots=1\n{line}\n", "hf")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_empty_missing_and_unreadable(tmp_path):
    with pytest.raises(UsageError, match="lists no hosts"):
        parse_hostfile("# nothing\n\n", "hf")
    with pytest.raises(UsageError, match="hostfile not found: .*nope"):
        read_hostfile(tmp_path / "nope")
    with pytest.raises(UsageError, match="cannot read hostfile"):
        read_hostfile(tmp_path)  # a folder
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="cannot read hostfile"):
        read_hostfile(binary)


def test_world_takes_first_hosts_and_gpus_override():
    hosts = [Host("a", 4), Host("b", 2), Host("c", 1)]
    world = select_world(hosts, 2, None, "hf")
    assert (world.nodes, world.devices, world.hostnames) == (2, 6, ["a", "b"])
    world = select_world(hosts, 3, 8, "hf")
    assert (world.nodes, world.devices) == (3, 24)


def test_more_nodes_than_hosts_names_file_and_count():
    with pytest.raises(UsageError, match=r"NODES=4 but hostfile hostfiles/x lists 3 host\(s\)"):
        select_world([Host("a", 1), Host("b", 1), Host("c", 1)], 4, None, "hostfiles/x")


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "", " "])
def test_positive_int_refuses(value):
    with pytest.raises(UsageError, match=f"NODES must be a positive integer, got '{value}'"):
        positive_int(value, "NODES")


def test_positive_int_accepts():
    assert positive_int("4", "NODES") == 4
