"""Hostfiles in OpenMPI (`host slots=N`) or MPICH (`host:N`) syntax, and the world a run uses."""

import re
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError

HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?$")
OPENMPI_KEYS = {"slots", "max_slots", "max-slots"}


@dataclass(frozen=True)
class Host:
    name: str
    slots: int


@dataclass(frozen=True)
class World:
    """The hosts a run uses and how many devices (processes) each of them gets."""

    hosts: tuple[Host, ...]
    source: str

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def devices(self) -> int:
        return sum(h.slots for h in self.hosts)

    @property
    def hostnames(self) -> list[str]:
        return [h.name for h in self.hosts]


def read_hostfile(path: str | Path) -> list[Host]:
    path = Path(path)
    if not path.exists():
        raise UsageError(f"hostfile not found: {path} (pass HOSTFILE=..., e.g. hostfiles/localhost)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read hostfile {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_hostfile(text, str(path))


def parse_hostfile(text: str, source: str) -> list[Host]:
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host = _parse_line(line, f"{source}:{lineno}")
        if host.name in seen:
            raise UsageError(
                f"{source}:{lineno}: host '{host.name}' is listed again (first on line {seen[host.name]}); "
                "give each host once with its slot count"
            )
        seen[host.name] = lineno
        hosts.append(host)
    if not hosts:
        raise UsageError(f"hostfile {source} lists no hosts (only comments or blank lines)")
    return hosts


def _parse_line(line: str, where: str) -> Host:
    name, *fields = line.split()
    slots = 1
    if ":" in name and not fields:
        name, _, count = name.partition(":")
        slots = _slot_count(count, where)
    for field in fields:
        key, eq, value = field.partition("=")
        if not eq or key not in OPENMPI_KEYS:
            raise UsageError(f"{where}: cannot parse '{line}' (expected 'host', 'host slots=N' or 'host:N')")
        if key == "slots":
            slots = _slot_count(value, where)
    if not HOSTNAME.match(name):
        raise UsageError(f"{where}: '{name}' is not a valid host name (letters, digits, '.', '-', '_' only)")
    return Host(name, slots)


def _slot_count(value: str, where: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"{where}: bad slot count '{value}' (expected a positive integer)")
    return int(value)


def select_world(hosts: list[Host], nodes: int, gpus_per_node: int | None, source: str) -> World:
    """The first `nodes` hosts; `gpus_per_node` overrides their slot counts."""
    if nodes > len(hosts):
        raise UsageError(
            f"NODES={nodes} but hostfile {source} lists {len(hosts)} host(s); "
            "lower NODES or add hosts to the hostfile (to try up to 4 nodes on this machine: "
            "HOSTFILE=hostfiles/loopback4)"
        )
    chosen = hosts[:nodes]
    if gpus_per_node is not None:
        chosen = [Host(h.name, gpus_per_node) for h in chosen]
    return World(tuple(chosen), source)


def profile_hostfile(cluster) -> Path:
    """The hostfile a cluster profile names, else hostfiles/localhost."""
    return Path(cluster.hostfile) if cluster and cluster.hostfile else paths.HOSTFILES / "localhost"
