"""tf.distribute: on one node a single process whose MirroredStrategy drives the node's devices; on
several nodes one process per node with MultiWorkerMirroredStrategy, told its place by TF_CONFIG
(the first host is the chief)."""

import json

from suite.execution.plan import Launch, Plan, Process
from suite.inputs.host_network import free_port

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "1"}  # TensorFlow's C++ INFO lines drown the progress


def cluster_spec(hosts: list[str]) -> dict:
    """TF_CONFIG's cluster: the first host as chief, the rest as workers, each with a free port."""
    taken: set[int] = set()
    addresses = []
    for host in hosts:
        port = free_port(taken)
        taken.add(port)
        addresses.append(f"{host}:{port}")
    return {"chief": addresses[:1], "worker": addresses[1:]}


def tf_config(cluster: dict, index: int) -> dict:
    """TF_CONFIG of the index-th host: the chief is 0, worker i of the cluster is index i + 1."""
    task = {"type": "chief", "index": 0} if index == 0 else {"type": "worker", "index": index - 1}
    return {"cluster": cluster, "task": task}


def plan(launch: Launch) -> Plan:
    world = launch.world
    argv = launch.stack_env.argv("python", launch.script, *launch.case_argv)
    if world.nodes == 1:
        host = world.hosts[0]
        env = launch.env(host, SUITE_PROCESSES_ON_HOST="1", **QUIET_TF)
        process = Process("worker-0", host.name, argv, env, launch.run_dir)
        return Plan((process,), ranks=1, details={"launcher": "tfdist", "strategy": "MirroredStrategy"})
    cluster = cluster_spec(world.hostnames)
    processes = []
    for index, host in enumerate(world.hosts):
        env = launch.env(host, TF_CONFIG=json.dumps(tf_config(cluster, index)),
                         SUITE_PROCESSES_ON_HOST=str(launch.processes_on_machine(host, per_host=1)), **QUIET_TF)
        processes.append(Process(f"worker-{index}", host.name, argv, env, launch.run_dir))
    details = {"launcher": "tfdist", "strategy": "MultiWorkerMirroredStrategy", "tf_cluster": cluster}
    return Plan(tuple(processes), ranks=world.nodes, details=details)
