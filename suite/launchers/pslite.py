"""ps-lite, MXNet's parameter-server layer: one scheduler on the first host, S servers spread over
the hosts (default one per host), one worker per host driving all of that host's devices.

Every process runs the case script with the same arguments; DMLC_ROLE tells it what to be. The
DMLC_* environment mirrors what MXNet's own dmlc_tracker gives its processes (tracker.py: the
scheduler's root address and counts; local.py: DMLC_TASK_ID, workers first; ssh.py: DMLC_NODE_HOST).
The tracker itself is not used to start them: it is importable only inside the stack, it starts
everything from one process (local) or over ssh itself, where the suite's schedulers must place each
process (here, over ssh or under SLURM), and as shipped with mxnet 1.9.1 it fails on Python >= 3.9
(Thread.isAlive). tests/integration/test_mxnet_imagenet.py checks the environment against the tracker's.
Hosts are named as the world names them (SLURM node names included): ps-lite binds DMLC_NODE_HOST and
the scheduler's DMLC_PS_ROOT_URI as addresses, so the case resolves them on its node first.

Cases launched this way may declare the options `kv-store` (a kvstore type, or "auto": distributed
over several nodes) and `num-servers` (0 = one per node). A single node with a non-distributed
kvstore gets one worker and no ps-lite processes.
"""

from suite.base.errors import UsageError
from suite.execution.plan import Launch, Plan, Process
from suite.inputs.host_network import free_port
from suite.inputs.hostfiles import Host


def distributed(kvstore: str, nodes: int) -> bool:
    return kvstore.startswith("dist") or (kvstore == "auto" and nodes > 1)


def check(launch: Launch) -> None:
    kvstore, nodes = launch.options.get("kv-store", "auto"), launch.world.nodes
    if nodes > 1 and not distributed(kvstore, nodes):
        raise UsageError(f"kv-store {kvstore} works inside one process; for {nodes} nodes use "
                         "dist_sync, dist_device_sync or auto")


def plan(launch: Launch) -> Plan:
    kvstore = launch.options.get("kv-store", "auto")
    world = launch.world
    if not distributed(kvstore, world.nodes):
        return single_worker(launch, kvstore)
    servers = launch.options.get("num-servers") or world.nodes
    return pslite_plan(launch, kvstore, servers)


def single_worker(launch: Launch, kvstore: str) -> Plan:
    host = launch.world.hosts[0]
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)
    worker = Process("worker-0", host.name, argv, launch.env(host), launch.run_dir)
    return Plan((worker,), ranks=1, details={"launcher": "pslite", "kvstore": kvstore, "servers": 0, "workers": 1})


def pslite_plan(launch: Launch, kvstore: str, servers: int) -> Plan:
    hosts = launch.world.hosts
    workers = len(hosts)
    common = {"DMLC_PS_ROOT_URI": hosts[0].name, "DMLC_PS_ROOT_PORT": str(free_port()),
              "DMLC_NUM_SERVER": str(servers), "DMLC_NUM_WORKER": str(workers)}
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)

    def process(name: str, host: Host, role: str, task_id: int | None) -> Process:
        dmlc = {**common, "DMLC_ROLE": role, "DMLC_NODE_HOST": host.name}
        if task_id is not None:
            dmlc["DMLC_TASK_ID"] = str(task_id)
        return Process(name, host.name, argv, launch.env(host, **dmlc), launch.run_dir)

    # Workers first: when one fails, the run's reason names it rather than a process ended after it.
    processes = [process(f"worker-{i}", host, "worker", i) for i, host in enumerate(hosts)]
    processes += [process(f"server-{i}", hosts[i % workers], "server", workers + i) for i in range(servers)]
    processes.append(process("scheduler", hosts[0], "scheduler", None))
    details = {"launcher": "pslite", "kvstore": kvstore, "servers": servers, "workers": workers,
               "ps_root": f"{common['DMLC_PS_ROOT_URI']}:{common['DMLC_PS_ROOT_PORT']}"}
    return Plan(tuple(processes), ranks=workers, details=details)
