"""Horovod's own rendezvous server (horovod.runner.http.http_server.RendezvousServer, as horovodrun's
launch_gloo runs it) for ranks the scheduler starts itself (srun steps, local processes): run
inside the stack on the first host, `python -m suite.launchers._horovod_rendezvous HOSTS PORT`
with HOSTS as horovodrun's -H (host:slots,...). It serves until SIGTERM, then exits 0. Not a
launcher (the leading underscore keeps it out of the plugin list); imports nothing of the suite but
the probe, to say where it runs."""

import signal
import sys


def main(hosts: str, port: int) -> int:
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http import http_server

    from suite.instack.probe import announce

    announce()
    parsed = parse_hosts(hosts)
    slots = get_host_assignments(parsed, sum(h.slots for h in parsed))
    # RendezvousServer picks a random port; every rank was told this one when the plan was made.
    http_server.find_port = lambda factory: (factory(("", port)), port)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    server = http_server.RendezvousServer()
    server.start()
    server.init(slots)
    print(f"horovod rendezvous server on port {port} for {len(slots)} rank(s) on {hosts}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2])))
