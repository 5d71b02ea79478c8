"""torchrun (torch.distributed.run): one elastic agent per node, started on its host by the
scheduler (here, over ssh, as a SLURM step), each starting that node's workers itself. The agents
meet in a c10d rendezvous hosted by the first host's agent (`is_host` says which one hosts it:
torchrun's own guess takes every loopback address for the host); workers then connect to the
first node's agent address.

When a worker dies the agent of its node stops the node's other workers and exits non-zero (no
restarts); the scheduler then ends the agents of the other nodes, which signal their workers at once
and kill them after --shutdown-timeout (torch 2.12 and later; older agents wait 30 s). Workers run in
process groups of their own, so ending a job relies on the agent (or, over ssh, on the job marker
every process inherits). The agents' folders (a failed worker's error.json) go to the run's folder,
torchrun/, not a folder of their own in /tmp that nothing removes."""

import os
from pathlib import Path

from suite.execution.plan import Launch, Plan, Process
from suite.inputs.host_network import free_port

SHUTDOWN_S = 5  # agent's wait for its workers after SIGTERM before SIGKILL; within the scheduler's grace
# Options of torchrun that not every torch has: the release that brought them. The stack's torch
# (its package list) decides which are passed; an unknown version gets them all.
SINCE = {"--shutdown-timeout": (2, 12)}


def has_option(launch: Launch, option: str) -> bool:
    version = launch.stack_env.version("torch")
    if version is None:
        return True
    try:
        found = tuple(int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return True
    return found >= SINCE[option]


def rendezvous_id(run_dir: str) -> str:
    """Unique per launch: the run id and the repetition (runs/<run_id>/rep-N)."""
    path = Path(run_dir)
    return f"{path.parent.name}-{path.name}"


def plan(launch: Launch) -> Plan:
    world = launch.world
    endpoint = f"{world.hosts[0].name}:{free_port()}"
    processes = []
    for index, host in enumerate(world.hosts):
        argv = launch.stack_env.argv(
            "torchrun", "--nnodes", str(world.nodes), "--nproc-per-node", str(host.slots),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rendezvous_id(launch.run_dir),
            "--rdzv-conf", f"is_host={int(index == 0)}", "--local-addr", host.name, "--max-restarts", "0",
            "--log-dir", str(Path(launch.run_dir) / "torchrun"),
            *(["--shutdown-timeout", str(SHUTDOWN_S)] if has_option(launch, "--shutdown-timeout") else []),
            launch.script, *launch.case_argv)
        env = launch.env(host, SUITE_PROCESSES_ON_HOST=str(launch.processes_on_machine(host)))
        env.update(omp_threads(host.slots, env))
        processes.append(Process(f"torchrun-{index}", host.name, argv, env, launch.run_dir))
    details = {"launcher": "torchrun", "rdzv_endpoint": endpoint, "nproc_per_node": [h.slots for h in world.hosts],
               **ddp_details(launch.options)}
    return Plan(tuple(processes), ranks=world.devices, details=details)


def omp_threads(workers: int, env: dict, environ=os.environ) -> dict:
    """OMP_NUM_THREADS=1 where torchrun would set it itself (two or more workers on the node, and neither this
    environment nor the process's names one): torchrun's own value, given beforehand so that it does not print
    its four-line warning about it. The cases size their thread pools from their CPU share (bind_cpus)."""
    if workers > 1 and "OMP_NUM_THREADS" not in environ and "OMP_NUM_THREADS" not in env:
        return {"OMP_NUM_THREADS": "1"}
    return {}


def ddp_details(options: dict) -> dict:
    """The case's distributed settings as the record's execution shows them (the case reports what
    it resolved, e.g. the backend `auto` chose, in config.reported_by_case)."""
    keys = ("bucket-cap-mb", "static-graph", "gradient-as-bucket-view")
    details = {"ddp": {k.replace("-", "_"): options[k] for k in keys if k in options}}
    return {**details, "backend_requested": options["backend"]} if "backend" in options else details
