"""horovodrun, with its question "was Horovod built with Gloo / MPI?" answered from the stack's facts:
`python -m suite.launchers._horovodrun BUILT ARGS...`, BUILT the controllers the stack's install check
found (suite-facts.json: horovod_gloo, horovod_mpi), comma-separated; ARGS are horovodrun's.

Before every launch horovodrun forks a process that imports horovod.torch, and with it torch, only to
ask that question: about 1 s of every run's start on a 2-core machine (`make bench`, start-up). The
stack's lock pins that build, and its install asked once. Not a launcher (the leading underscore
keeps it out of the plugin list); imports nothing of the suite, so it runs inside container images too."""

import sys


def main(built: str, argv: list[str]) -> int:
    from horovod.runner import launch

    controllers = set(built.split(","))
    launch.gloo_built = lambda verbose=False: "gloo" in controllers
    launch.mpi_built = lambda verbose=False: "mpi" in controllers
    sys.argv = ["horovodrun", *argv]
    return launch.run_commandline()


# The guard matters: horovodrun's job runs under multiprocessing, which imports this module again.
if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2:]))
