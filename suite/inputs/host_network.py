"""Network facts that launchers and schedulers share: which host names are this machine, a free TCP port,
and whether each host has the network interfaces that variables such as NCCL_SOCKET_IFNAME name."""

import random
import socket
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from itertools import chain
from pathlib import Path

from suite.base.errors import UsageError


@cache
def is_local(host: str) -> bool:
    """This machine: localhost, its host name, or a name/address that resolves to an address this
    machine can bind (all of 127.0.0.0/8 included, as Linux routes it to the loopback device)."""
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    return any(_bindable(family, address[0]) for family, _, _, _, address in infos)


def _bindable(family: int, address: str, port: int = 0) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, port))
        return True
    except OSError:
        return False


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
SERVER_PORTS = 12_000  # how many ports below the ephemeral range a server port is drawn from


def server_port_range(ephemeral: Path = EPHEMERAL_RANGE) -> range:
    """Ports for servers of a run: the SERVER_PORTS just below the kernel's ephemeral range (never
    below 1024). A port in the ephemeral range can be taken before the server binds it, by any outgoing
    connection on its host, a client's retries to that very port included (TCP connects to itself
    when its source port is the one it dials): the EADDRINUSE of a rendezvous. Empty when the
    ephemeral range leaves no room below it."""
    try:
        low = int(ephemeral.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(max(1024, low - SERVER_PORTS), low)


def free_port(taken: Collection[int] = ()) -> int:
    """A TCP port free on every address of this machine, outside the ephemeral range, not in `taken`.

    Servers of launchers (ps-lite's scheduler, TensorFlow's workers, torchrun's rendezvous) listen on
    all addresses, so the port is tested on all of them. A remote host's ports cannot be tested from
    here; this machine's free port is the best guess for it (dmlc_tracker makes the same bet), drawn
    at random so that runs started together on shared nodes pick different ones."""
    ports = server_port_range()
    if not ports:
        return next(port for port in iter(_kernel_port, None) if port not in taken)
    start = random.randrange(len(ports))  # then every port once, from there on
    for port in chain(ports[start:], ports[:start]):
        if port not in taken and _bindable(socket.AF_INET, "", port):
            return port
    raise OSError(f"no free TCP port in {ports[0]}-{ports[-1]}")


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


# A host's network interfaces and InfiniBand devices, as the probe before launch prints them: /proc/net/dev lists
# every interface of the network namespace of whoever reads it (/sys/class/net shows the namespace sysfs was
# mounted in); /sys/class/infiniband the RDMA devices (InfiniBand, RoCE), absent where there are none.
INTERFACES_SCRIPT = ("echo \"net interfaces=$(tail -n +3 /proc/net/dev 2>/dev/null | cut -d: -f1 | tr -d ' ' "
                     "| tr '\\n' ,)\"; echo \"ib devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\\n' ,)\"")
PROBE_LINES = {"net": "net interfaces=", "ib": "ib devices="}


@dataclass(frozen=True)
class Naming:
    """How a variable names a host's devices: `prefixes` (NCCL's: `=` for exact names, `^` for all but those),
    `names` (a list, each of which must exist), `name` (one), `any` (a list of which one must exist, each may
    carry a `:port`; `all` and `^` exclusions pass) or `network` (NCCL_NET's: IB needs a device of the list, Socket
    and a plugin's network nothing of it); which of the probe's lists it names (net, ib, or both); and what the
    processes do where nothing it names is there."""

    kind: str
    devices: str
    without: str

    @property
    def noun(self) -> str:
        return {"net": "interface", "ib": "InfiniBand device"}.get(self.devices, "network device")


NO_SOCKET = "its processes would find no socket to use"
# Gloo's (PyTorch) list is of names; Horovod's Gloo and ps-lite (MXNet) take one name; NCCL (and RCCL) falls back
# from InfiniBand to its sockets where NCCL_IB_HCA leaves it no device: a run that measures the wrong network.
INTERFACE_VARIABLES = {
    "NCCL_SOCKET_IFNAME": Naming("prefixes", "net", NO_SOCKET),
    "GLOO_SOCKET_IFNAME": Naming("names", "net", NO_SOCKET),
    "HOROVOD_GLOO_IFACE": Naming("name", "net", NO_SOCKET),
    "DMLC_INTERFACE": Naming("name", "net", NO_SOCKET),
    "NCCL_IB_HCA": Naming("prefixes", "ib", "NCCL would fall back to its sockets and the run would measure those"),
    # NCCL's network by name: a network NCCL cannot find fails the communicator's start; a plugin's (AWS Libfabric,
    # its library on NCCL_NET_PLUGIN or LD_LIBRARY_PATH) is not looked for here
    "NCCL_NET": Naming("network", "ib", "NCCL would find no network IB and its communicator would fail to start"),
    # UCX (Open MPI's and MPICH's transport layer: Horovod's MPI controller, srun's MPI) names InfiniBand ports
    # (mlx5_0:1) and interfaces; it warns of each one absent and fails only where none of them is there
    "UCX_NET_DEVICES": Naming("any", "both", "UCX would find no network device and MPI over it would not start"),
}


def devices_from_probe(text: str, devices: str = "net") -> list[str] | None:
    """The names of the probe's line of `devices` (net: interfaces, ib: InfiniBand devices, both: the two); None
    where it printed no such line (or, for interfaces, an empty one: /proc/net/dev unread; a host has at least lo)."""
    if devices == "both":
        net = devices_from_probe(text, "net")
        return None if net is None else net + (devices_from_probe(text, "ib") or [])
    line = next((line for line in text.splitlines() if line.startswith(PROBE_LINES[devices])), None)
    if line is None:
        return None
    names = [name for name in line[len(PROBE_LINES[devices]):].split(",") if name]
    return (names or None) if devices == "net" else names


def interfaces_missing(variable: str, value: str, devices: list[str]) -> str | None:
    """What of `value` the host's devices lack, in words with the devices it has (the whole filter, or the
    names not there); None where the processes would find what the variable asks for."""
    naming = INTERFACE_VARIABLES[variable]
    if naming.kind == "network":
        return None if devices or value.strip().lower() != "ib" else f"has no {naming.noun} at all"
    if not devices:
        return f"has no {naming.noun} at all"
    if naming.kind == "prefixes":
        lacks = None if nccl_matches(value, devices) else f"has no {naming.noun} it matches"
    elif naming.kind == "any":
        names = [entry.split(":")[0].strip() for entry in value.split(",") if entry.strip()]
        passes = value.strip() == "all" or value.strip().startswith("^") or any(n in devices for n in names)
        lacks = None if passes else f"has none of the {naming.noun}s it names"
    else:
        names = [value.strip()] if naming.kind == "name" else [n.strip() for n in value.split(",") if n.strip()]
        absent = [name for name in names if name not in devices]
        lacks = f"has no {naming.noun} {', '.join(absent)}" if absent else None
    return lacks and f"{lacks} (its {naming.noun}s: {', '.join(sorted(devices))})"


def refuse_missing_interfaces(settings: dict[str, tuple[str, str]], outputs: dict[str, str | None]) -> None:
    """UsageError where a host lacks what an interface variable names. settings: variable -> (value, where it
    was set); outputs: each host's probe output (None: not probed, nothing to say of it)."""
    for host, text in outputs.items():
        for variable, (value, whence) in settings.items():
            naming = INTERFACE_VARIABLES[variable]
            devices = devices_from_probe(text or "", naming.devices)
            if devices is not None and (what := interfaces_missing(variable, value, devices)):
                fix = "name one of these, or leave it unset" if devices else "leave it unset there"
                raise UsageError(f"{variable}={value} ({whence}): host {host} {what}, so {naming.without}: {fix}")


def nccl_matches(value: str, interfaces: list[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME lets NCCL use: prefixes (`ib,eth`), exact names after `=`, all but
    the listed after `^` (`^docker,lo`, `^=eth0`); each entry may carry a `:port`."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    wanted = [entry.split(":")[0].strip() for entry in value.split(",") if entry.split(":")[0].strip()]

    def listed(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [name for name in interfaces if listed(name) != exclude]
