"""Network facts about this machine that launchers and schedulers share: which host names are this
machine, and a free TCP port."""

import random
import socket
from collections.abc import Collection
from functools import cache
from itertools import chain
from pathlib import Path


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

