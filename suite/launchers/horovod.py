"""Horovod. On one node, and over ssh, one horovodrun on the first host starts a worker per device on
every host (MPI where the stack's Horovod has it and mpirun is on PATH, otherwise Gloo; other hosts
through ssh, with the ssh scheduler's settings). horovodrun is told what the stack's Horovod was
built with (suite/launchers/_horovodrun.py), rather than finding out by importing torch at every start.

Where the scheduler places processes itself (`srun` steps inside a SLURM allocation, local processes
when the hosts are loopback addresses of this machine, and ssh when the stack is an image: horovodrun
in a container would start the other hosts' workers outside it) it starts every rank itself. With
MPI under srun: one step of all ranks, `srun --mpi=<[slurm] mpi>` (MPI gives the ranks). Otherwise
Gloo: one process per rank with the environment horovodrun's gloo_run gives each worker
(create_slot_env_vars, create_run_env_vars; the interface is left to Gloo, which binds the address of
HOROVOD_HOSTNAME's host name: set HOROVOD_GLOO_IFACE to pick one), and Horovod's own RendezvousServer
on the first host, a daemon process of the plan (suite/launchers/_horovod_rendezvous.py).

HOROVOD_CONTROLLER=gloo|mpi in the runner's environment (Horovod's own switch) picks the controller
instead: Gloo where the image's MPI cannot be started by the site's srun (no PMIx of its kind)."""

import os
import shutil
from dataclasses import replace

from suite.base.errors import UsageError
from suite.execution.plan import Launch, Plan, Process, StackEnv
from suite.inputs.host_network import free_port, is_local

CONTROLLERS = ("gloo", "mpi")


def asked_controller() -> str | None:
    """HOROVOD_CONTROLLER where it is set (refused, one line, when it names neither controller)."""
    asked = os.environ.get("HOROVOD_CONTROLLER", "").strip().lower()
    if asked and asked not in CONTROLLERS:
        raise UsageError(f"HOROVOD_CONTROLLER={asked!r}: Horovod's controllers are gloo and mpi")
    return asked or None


def controller(stack_env: StackEnv) -> str:
    """HOROVOD_CONTROLLER where set; else MPI where Horovod has it and mpirun is found: in the stack's
    environment where its facts say (a site's modules), else on this machine's PATH."""
    if asked := asked_controller():
        return asked
    facts = stack_env.facts
    mpirun = facts["mpirun"] if "mpirun" in facts else shutil.which("mpirun")
    return "mpi" if facts.get("horovod_mpi") and mpirun else "gloo"


def srun_controller(stack_env: StackEnv) -> str:
    """Under srun no mpirun is needed: MPI where Horovod has it, unless HOROVOD_CONTROLLER says."""
    return asked_controller() or ("mpi" if stack_env.facts.get("horovod_mpi") else "gloo")


def check(launch: Launch) -> None:
    """What the stack's Horovod was built with, where its facts say (a site's Horovod may lack
    PyTorch, or both controllers); the local scheduler starts everything here: a host elsewhere
    would need horovodrun's ssh."""
    check_build(launch.stack_env.facts)
    if (asked := asked_controller()) and launch.stack_env.facts.get(f"horovod_{asked}") is False:
        raise UsageError(f"HOROVOD_CONTROLLER={asked}, but the stack's Horovod was built without {asked} "
                         "(horovodrun --check-build)")
    if launch.placement != "local":
        return
    if away := [h.name for h in launch.world.hosts if not is_local(h.name)]:
        raise UsageError(f"host {away[0]} is not this machine: the local scheduler starts every process here, and "
                         "horovodrun would need ssh to reach it; use SCHEDULER=ssh (a hostfile of reachable hosts), "
                         "SCHEDULER=slurm inside an allocation, or try several nodes on this machine with "
                         "HOSTFILE=hostfiles/loopback4")


def check_build(facts: dict) -> None:
    """Facts not read yet (before the stack is prepared) pass; Horovod without PyTorch, or without
    Gloo and MPI, is refused naming what to add."""
    if facts.get("horovod_torch") is False:
        raise UsageError("the stack's Horovod cannot run PyTorch "
                         f"(import horovod.torch: {facts.get('horovod_error')}); "
                         "load a Horovod built with PyTorch (HOROVOD_WITH_PYTORCH=1)")
    if "horovod_gloo" in facts and not facts["horovod_gloo"] and not facts.get("horovod_mpi"):
        raise UsageError("the stack's Horovod has neither Gloo nor MPI (horovodrun --check-build); load a Horovod "
                         "built with one (HOROVOD_WITH_GLOO=1, or HOROVOD_WITH_MPI=1 with the site's MPI)")


def plan(launch: Launch) -> Plan:
    in_image = bool(launch.stack_env.provenance.get("image"))
    if launch.world.nodes == 1 or (launch.placement == "ssh" and not in_image):
        return horovodrun_plan(launch)
    if launch.placement == "srun" and srun_controller(launch.stack_env) == "mpi":
        return mpi_step_plan(launch)
    return gloo_ranks_plan(launch)


def horovodrun_plan(launch: Launch) -> Plan:
    world, stack_env = launch.world, launch.stack_env
    ctl = controller(stack_env)
    hosts = ",".join(f"{h.name}:{h.slots}" for h in world.hosts)
    # horovodrun starts the workers itself, on its own host in its container where there is one
    worker = replace(stack_env, prefix=()).argv("python", launch.script, *launch.case_argv)
    # Hosts that are all this machine reach each other over the loopback interface only: without this,
    # horovodrun picks among every interface the machine has (bridges of containers or test nodes too).
    loopback = ["--network-interfaces", "lo"] if world.nodes > 1 and all(is_local(h.name) for h in world.hosts) else []
    argv = horovodrun(stack_env, "-np", str(world.devices), "-H", hosts, f"--{ctl}", *loopback, *worker)
    # ... and share its cores: every worker gets the same environment, so each finds its slot from its rank
    shared = {"SUITE_SLOT_OFFSET": "ranks", "SUITE_MACHINE_SLOTS": str(world.devices)} if loopback else {}
    launcher = Process(name="horovodrun", host=world.hosts[0].name, argv=argv, env=launch.env(**shared),
                       cwd=launch.run_dir)
    return Plan((launcher,), ranks=world.devices, details={"launcher": "horovod", "controller": ctl})


def horovodrun(stack_env: StackEnv, *args: str) -> list[str]:
    """horovodrun ARGS, told what the stack's Horovod was built with where its facts say
    (suite/launchers/_horovodrun.py); a stack without those facts lets horovodrun find out itself."""
    built = [ctl for ctl in ("gloo", "mpi") if stack_env.facts.get(f"horovod_{ctl}")]
    if not built:
        return stack_env.argv("horovodrun", *args)
    return stack_env.argv("python", "-m", "suite.launchers._horovodrun", ",".join(built), *args)


def mpi_step_plan(launch: Launch) -> Plan:
    world, first = launch.world, launch.world.hosts[0]
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)
    ranks = Process("ranks", first.name, argv, launch.env(first), launch.run_dir,
                    mpi_tasks={h.name: h.slots for h in world.hosts})
    return Plan((ranks,), ranks=world.devices, details={"launcher": "horovod", "controller": "mpi"})


def slot_env(hosts, index: int, local_rank: int, rank: int, size: int) -> dict:
    """What horovodrun's create_slot_env_vars gives a rank (get_host_assignments' slots)."""
    host = hosts[index]
    cross = [h for h in hosts if h.slots > local_rank]  # the hosts that have this local rank
    return {"HOROVOD_HOSTNAME": host.name, "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
            "HOROVOD_LOCAL_RANK": str(local_rank), "HOROVOD_LOCAL_SIZE": str(host.slots),
            "HOROVOD_CROSS_RANK": str(cross.index(host)), "HOROVOD_CROSS_SIZE": str(len(cross))}


def gloo_ranks_plan(launch: Launch) -> Plan:
    world, first = launch.world, launch.world.hosts[0]
    port = str(free_port())
    run_env = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": first.name, "HOROVOD_GLOO_RENDEZVOUS_PORT": port,
               "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "PYTHONUNBUFFERED": "1"}
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)
    ranks = []
    for index, host in enumerate(world.hosts):
        sharing = str(launch.processes_on_machine(host))
        for local_rank in range(host.slots):
            env = launch.env(host, **run_env, **slot_env(world.hosts, index, local_rank, len(ranks), world.devices),
                             SUITE_PROCESSES_ON_HOST=sharing)
            ranks.append(Process(f"rank-{len(ranks)}", host.name, argv, env, launch.run_dir))
    spec = ",".join(f"{h.name}:{h.slots}" for h in world.hosts)
    server = launch.stack_env.argv("python", "-m", "suite.launchers._horovod_rendezvous", spec, port)
    rendezvous = Process("rendezvous", first.name, server, launch.env(first), launch.run_dir, daemon=True)
    details = {"launcher": "horovod", "controller": "gloo", "rendezvous": f"{first.name}:{port}"}
    return Plan((*ranks, rendezvous), ranks=world.devices, details=details)
