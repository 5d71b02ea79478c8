"""Direct ranks, without torchrun: one process per device, started on its host by the scheduler
(here, over ssh, or as its own `srun` step inside an allocation), told its place the way torchrun
and srun-based site recipes do: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (the
first host) and MASTER_PORT. A failing rank is a failing process of the plan, so the scheduler ends
the job itself. (A case started by a bare `srun` reads SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS
instead; pytorch-ddp does.)"""

from suite.execution.plan import Launch, Plan, Process
from suite.inputs.host_network import free_port
from suite.launchers.torchrun import ddp_details


def plan(launch: Launch) -> Plan:
    world = launch.world
    master = {"MASTER_ADDR": world.hosts[0].name, "MASTER_PORT": str(free_port())}
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)
    processes, rank = [], 0
    for node, host in enumerate(world.hosts):
        sharing = str(launch.processes_on_machine(host))
        for local_rank in range(host.slots):
            env = launch.env(host, **master, RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world.devices),
                             LOCAL_WORLD_SIZE=str(host.slots), GROUP_RANK=str(node), SUITE_PROCESSES_ON_HOST=sharing)
            processes.append(Process(f"rank-{rank}", host.name, argv, env, launch.run_dir))
            rank += 1
    details = {"launcher": "ranks", "master": f"{master['MASTER_ADDR']}:{master['MASTER_PORT']}",
               **ddp_details(launch.options)}
    return Plan(tuple(processes), ranks=world.devices, details=details)
