"""A Ctrl-C (or tools/python-matrix.sh's interrupt for a SIGTERM to `make test`) that ends a pytest-xdist session
with every worker's fixtures torn down: their SLURM clusters, sshd, the Docker engine, network namespaces.

The interrupt reaches the controller and its workers alike (one process group). Each worker's KeyboardInterrupt
ends its test and its session, whose end tears its fixtures down; but a controller that takes the same
KeyboardInterrupt stops the workers at once, and pytest-xdist (through execnet) kills a worker that has not ended
10 s later, in the middle of a SLURM cluster's teardown. So the controller takes the first interrupt as a request
to stop: no further test starts, and it waits for the workers to end as they do on their own; a second interrupt
stops it as before. A session without workers is left as it is: its one process tears down what it made.
Loaded by conftest.py."""

import signal
import sys

SAID = "pytest: interrupted; the workers end their tests and tear their fixtures down (Ctrl-C again: stop now)"


def pytest_sessionstart(session):
    dsession = session.config.pluginmanager.getplugin("dsession")  # the controller of workers (-n N), only
    if dsession is None or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return

    def first_interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        dsession.shouldstop = "interrupted"
        print(f"\n{SAID}", file=sys.stderr, flush=True)

    signal.signal(signal.SIGINT, first_interrupt)
