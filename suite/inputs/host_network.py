"""Network facts about this machine that launchers and schedulers share: which host names are this
machine, and a free TCP port."""

import socket
from collections.abc import Collection
from functools import cache


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


def _bindable(family: int, address: str) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
        return True
    except OSError:
        return False


def free_port(taken: Collection[int] = ()) -> int:
    """A TCP port free on every address of this machine and not in `taken`.

    Servers of launchers (ps-lite's scheduler, TensorFlow's workers, torchrun's rendezvous) listen on
    all addresses, so the port is tested on all of them. A remote host's ports cannot be tested from
    here; this machine's free port is the best guess for it (dmlc_tracker makes the same bet)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port
