"""jax.distributed: one process per device, started on its host by the scheduler (here, over ssh, or as
its own `srun` step inside an allocation), each told where JAX's coordination service runs and which
process it is: JAX_COORDINATOR_ADDRESS (the first host, a free port; process 0 serves it),
JAX_NUM_PROCESSES and JAX_PROCESS_ID, which the case passes to `jax.distributed.initialize`, beside
RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE for its probe. A failing process is a failing process
of the plan, so the scheduler ends the job itself. (A case started by a bare `srun` reads SLURM_PROCID,
SLURM_LOCALID and SLURM_NTASKS instead: cases/_shared/jax_dist.py.)"""

from suite.execution.plan import Launch, Plan, Process
from suite.inputs.host_network import free_port

# XLA's CPU client prints a warning per process about its flags; TensorFlow's logging variable quiets it
QUIET_XLA = {"TF_CPP_MIN_LOG_LEVEL": "1"}


def plan(launch: Launch) -> Plan:
    world = launch.world
    coordinator = f"{world.hosts[0].name}:{free_port()}"
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)
    processes, rank = [], 0
    for node, host in enumerate(world.hosts):
        sharing = str(launch.processes_on_machine(host))
        for local_rank in range(host.slots):
            env = launch.env(host, JAX_COORDINATOR_ADDRESS=coordinator, JAX_NUM_PROCESSES=str(world.devices),
                             JAX_PROCESS_ID=str(rank), RANK=str(rank), LOCAL_RANK=str(local_rank),
                             WORLD_SIZE=str(world.devices), LOCAL_WORLD_SIZE=str(host.slots), GROUP_RANK=str(node),
                             SUITE_PROCESSES_ON_HOST=sharing, **QUIET_XLA)
            processes.append(Process(f"rank-{rank}", host.name, argv, env, launch.run_dir))
            rank += 1
    details = {"launcher": "jaxdist", "coordinator": coordinator, "processes": world.devices}
    return Plan(tuple(processes), ranks=world.devices, details=details)
