"""Network facts that launchers and schedulers share: which host names are this machine, a free TCP port,
and whether each host has the network interfaces that variables such as NCCL_SOCKET_IFNAME name."""

import random
import socket
from collections.abc import Collection
from dataclasses import dataclass, field
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


# A host's network interfaces and fabric devices, as the probe before launch prints them: /proc/net/dev lists
# every interface of the network namespace of whoever reads it (/sys/class/net shows the namespace sysfs was
# mounted in); /sys/class/infiniband the RDMA devices (InfiniBand, RoCE, AWS EFA), absent where there are none, and
# of those the ones EFA's driver runs; /sys/class/cxi the Slingshot NICs (HPE's cxi driver).
INTERFACES_SCRIPT = ("echo \"net interfaces=$(tail -n +3 /proc/net/dev 2>/dev/null | cut -d: -f1 | tr -d ' ' "
                     "| tr '\\n' ,)\"; echo \"ib devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\\n' ,)\"; "
                     "echo \"efa devices=$(for d in /sys/class/infiniband/*; do case $(readlink \"$d/device/driver\" "
                     "2>/dev/null) in */efa) printf '%s,' \"${d##*/}\";; esac; done)\"; "
                     "echo \"cxi devices=$(ls /sys/class/cxi 2>/dev/null | tr '\\n' ,)\"")
PROBE_LINES = {"net": "net interfaces=", "ib": "ib devices=", "efa": "efa devices=", "cxi": "cxi devices="}


@dataclass(frozen=True)
class Naming:
    """How a variable names a host's devices: `prefixes` (NCCL's: `=` for exact names, `^` for all but those),
    `names` (a list, each of which must exist), `name` (one), `any` (a list of which one must exist, each may
    carry a `:port`; `all` and `^` exclusions pass), `network` (NCCL_NET's: IB needs a device of the list, Socket
    and a plugin's network nothing of it) or `providers` (FI_PROVIDER's, UCX_TLS's: one of the names it lists must
    need no device of its own, or have its kind of device (`needs`: name -> kind) on the host; `^` exclusions pass);
    which of the probe's lists it names (net, ib, both, or fabric: each device as `kind:name`, the kind verbs, efa or
    cxi); and what the processes do where nothing it names is there."""

    kind: str
    devices: str
    without: str
    needs: dict = field(default_factory=dict)
    listing: str = ""  # what the names it lists are (providers: "libfabric providers")

    @property
    def noun(self) -> str:
        return {"net": "interface", "ib": "InfiniBand device", "fabric": "fabric device"}.get(self.devices,
                                                                                              "network device")


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
    # libfabric's providers (Cray MPICH, Open MPI's and Intel MPI's OFI layers, NCCL's aws-ofi plugin): a Slingshot
    # profile's cxi, or EFA's efa, on nodes without that NIC leaves libfabric nothing to offer; tcp, udp, shm,
    # sockets and providers not named here (psm3 runs over sockets too) need no device of their own
    "FI_PROVIDER": Naming("providers", "fabric", "libfabric would offer none of them: MPI over libfabric would not "
                          "start, and NCCL's OFI plugin would fail or leave NCCL on its sockets",
                          {"verbs": "verbs", "efa": "efa", "cxi": "cxi"}, "libfabric providers"),
    # UCX's InfiniBand transports (rc, ud, dc; _verbs/_v and _mlx5/_x their implementations; ib all of them) need an
    # RDMA device EFA's driver does not run; tcp, sm, self and the GPUs' own need none of the fabric
    "UCX_TLS": Naming("providers", "fabric", "UCX would have no transport to the other hosts and MPI over it would "
                      "not start", {name: "verbs" for name in ("ib", "rc", "ud", "dc", "rc_verbs", "rc_v", "rc_mlx5",
                                                                "rc_x", "ud_verbs", "ud_v", "ud_mlx5", "ud_x",
                                                                "dc_mlx5", "dc_x")}, "UCX transports"),
}


def devices_from_probe(text: str, devices: str = "net") -> list[str] | None:
    """The names of the probe's line of `devices` (net: interfaces, ib: InfiniBand devices, both: the two, fabric:
    `kind:device` for each device a provider or transport needs: fabric_devices); None where it printed no such
    line (or, for interfaces, an empty one: /proc/net/dev unread; a host has at least lo)."""
    if devices == "fabric":
        return fabric_devices(text)
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
    if naming.kind == "providers":
        return providers_missing(value, devices, naming)
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


def fabric_devices(text: str) -> list[str] | None:
    """`kind:device` for each device of the probe's lists a provider or transport needs (verbs: the RDMA devices
    EFA's driver does not run, efa: those it runs, cxi: Slingshot NICs); None where the probe printed no line of
    RDMA devices."""
    rdma = devices_from_probe(text, "ib")
    if rdma is None:
        return None
    efa, cxi = devices_from_probe(text, "efa") or [], devices_from_probe(text, "cxi") or []
    listed = {"verbs": [name for name in rdma if name not in efa], "efa": efa, "cxi": cxi}
    return [f"{provider}:{name}" for provider, names in listed.items() for name in names]


def providers_missing(value: str, devices: list[str], naming: Naming) -> str | None:
    """Where the value lists only names that need a kind of device (each entry's first part: libfabric's layered
    `verbs;ofi_rxm` is verbs) and the host has none of their kinds; None where one needs none or has its device, and
    for `^` exclusions."""
    names = {entry.split(";")[0].strip().lower() for entry in value.split(",") if entry.strip()}
    kinds = {device.split(":")[0] for device in devices}
    needed = [naming.needs.get(name) for name in names]  # None: the name needs no device of its own
    if value.strip().startswith("^") or any(kind is None or kind in kinds for kind in needed):
        return None
    if not devices:
        return f"has no {naming.noun} at all"
    return f"has no device of the {naming.listing} it names (its {naming.noun}s: {', '.join(sorted(devices))})"


def host_lacks(variable: str, value: str, text: str) -> tuple[str | None, list[str] | None]:
    """What of the variable's value the host whose probe printed `text` lacks, in words (None: nothing), and the
    devices of the kind it names that the host has (None: the probe did not list them, so nothing was checked)."""
    devices = devices_from_probe(text, INTERFACE_VARIABLES[variable].devices)
    return (None if devices is None else interfaces_missing(variable, value, devices)), devices


def refuse_missing_interfaces(settings: dict[str, tuple[str, str]], outputs: dict[str, str | None]) -> None:
    """UsageError where a host lacks what an interface variable names. settings: variable -> (value, where it
    was set); outputs: each host's probe output (None: not probed, nothing to say of it)."""
    for host, text in outputs.items():
        for variable, (value, whence) in settings.items():
            what, devices = host_lacks(variable, value, text or "")
            if what:
                fix = "name one of these, or leave it unset" if devices else "leave it unset there"
                raise UsageError(f"{variable}={value} ({whence}): host {host} {what}, so "
                                 f"{INTERFACE_VARIABLES[variable].without}: {fix}")


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
