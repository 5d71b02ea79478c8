"""Horovod: one horovodrun on the launch host starts a worker per device on every host of the world
(MPI where the stack's Horovod has it and mpirun is on PATH, otherwise Gloo)."""

import shutil

from suite.hostfile import World
from suite.plan import Plan, Process, StackEnv


def controller(stack_env: StackEnv) -> str:
    return "mpi" if stack_env.facts.get("horovod_mpi") and shutil.which("mpirun") else "gloo"


def plan(script: str, case_argv: list[str], world: World, stack_env: StackEnv, run_dir: str) -> Plan:
    ctl = controller(stack_env)
    hosts = ",".join(f"{h.name}:{h.slots}" for h in world.hosts)
    worker = stack_env.argv("python", script, *case_argv)
    argv = stack_env.argv("horovodrun", "-np", str(world.devices), "-H", hosts, f"--{ctl}", *worker)
    env = {**stack_env.env, "SUITE_RUN_DIR": run_dir}
    launcher = Process(name="horovodrun", host=world.hosts[0].name, argv=argv, env=env, cwd=run_dir)
    return Plan((launcher,), details={"launcher": "horovod", "controller": ctl})
