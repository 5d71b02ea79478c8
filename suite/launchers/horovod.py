"""Horovod: one horovodrun on the launch host starts a worker per device on every host of the world
(MPI where the stack's Horovod has it and mpirun is on PATH, otherwise Gloo). With a container
runtime horovodrun runs in the image and so do the workers it starts on this host; workers on other
hosts need the host's own launcher (srun/mpirun starting one container per rank)."""

import shutil
from dataclasses import replace

from suite.plan import Launch, Plan, Process, StackEnv


def controller(stack_env: StackEnv) -> str:
    return "mpi" if stack_env.facts.get("horovod_mpi") and shutil.which("mpirun") else "gloo"


def plan(launch: Launch) -> Plan:
    world, stack_env = launch.world, launch.stack_env
    ctl = controller(stack_env)
    hosts = ",".join(f"{h.name}:{h.slots}" for h in world.hosts)
    # horovodrun starts the workers of a host itself: inside a container they are already in it.
    worker = replace(stack_env, prefix=()).argv("python", launch.script, *launch.case_argv)
    argv = stack_env.argv("horovodrun", "-np", str(world.devices), "-H", hosts, f"--{ctl}", *worker)
    launcher = Process(name="horovodrun", host=world.hosts[0].name, argv=argv, env=launch.env(), cwd=launch.run_dir)
    return Plan((launcher,), ranks=world.devices, details={"launcher": "horovod", "controller": ctl})
