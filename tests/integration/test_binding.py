"""--cpu-bind: each rank binds itself to its share of the cores (suite/instack/cpu_binding.py), and the record
states the cpus each rank actually had (read back by the probe from /proc/self/status)."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, records_in, tiny, usable_cores

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import load_cluster
from suite.execution.plan import Launch, Process, StackEnv
from suite.inputs.hostfiles import Host, World
from suite.instack.cpu_binding import cpu_share, gpu_cpus, numa_cpus, parse_cpu_list, slots
from suite.instack.probe import cpus_allowed
from suite.schedulers import slurm

CORES = usable_cores()

# `nvidia-smi topo -m` of a 2-socket node with 2 GPUs (tab-separated, as the tool prints it)
TOPO = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\tSYS\t0-3,8-11\t0\t\tN/A\n"
        "GPU1\tNV18\t X \tSYS\t4-7,12-15\t1\t\tN/A\n"
        "NIC0\tSYS\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n")


def test_the_cores_are_split_evenly_over_the_slots_of_the_machine():
    assert cpu_share([0, 1], 0, 1, 2) == [0] and cpu_share([0, 1], 1, 2, 2) == [1]
    assert cpu_share(list(range(8)), 1, 2, 2) == [4, 5, 6, 7]
    assert cpu_share([0, 1], 0, 2, 2) == [0, 1]  # a process driving both slots of its node
    assert cpu_share([5], 1, 2, 2) == [5]  # fewer cores than slots: they share it


def test_hosts_of_one_machine_take_consecutive_slots(monkeypatch):
    for name in ("SUITE_SLOT_OFFSET", "SUITE_MACHINE_SLOTS", "SUITE_DEVICES_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    assert slots(1, 2) == (1, 2, 2)  # horovodrun's second worker: no slot variables
    world = World((Host("127.0.0.1", 1), Host("127.0.0.2", 1)), "loopback")
    launch = Launch("train.py", [], world, StackEnv("local", "/bin"), "/run", "/data", cpu_bind="cores")
    env = launch.env(world.hosts[1])
    assert (env["SUITE_CPU_BIND"], env["SUITE_SLOT_OFFSET"], env["SUITE_MACHINE_SLOTS"]) == ("cores", "1", "2")
    for name in ("SUITE_SLOT_OFFSET", "SUITE_MACHINE_SLOTS", "SUITE_DEVICES_PER_NODE"):
        monkeypatch.setenv(name, env[name])
    assert slots(0, 1) == (1, 2, 2)
    plain = Launch("train.py", [], World((Host("node1", 4),), "hf"), StackEnv("local", "/bin"), "/run", "/data")
    assert not {"SUITE_CPU_BIND", "SUITE_SLOT_OFFSET"} & set(plain.env(plain.world.hosts[0]))


def test_numa_and_gpu_affinity_are_read_from_the_system(tmp_path):
    for node, cpus in (("node0", "0-3,8-11"), ("node1", "4-7,12-15")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert numa_cpus([4, 5], str(tmp_path)) == parse_cpu_list("4-7,12-15")
    assert numa_cpus([1], str(tmp_path / "absent")) == {1}
    assert gpu_cpus([1], TOPO) == parse_cpu_list("4-7,12-15")
    assert gpu_cpus([0, 1], TOPO) == set(range(16))
    assert gpu_cpus([0], "\x1b[4mGPU0\tCPU Affinity\x1b[0m\nGPU0\t X \t0-1\n") == {0, 1}
    assert gpu_cpus([0], "no GPUs") == set()


def test_a_rank_binds_every_thread_it_has_and_reports_its_share():
    """The second of two ranks on this machine: its share of the cores this process may use (on one
    core both share it), for every thread it has, and as many threads as that share."""
    code = ("import os, threading, time; from suite.instack.cpu_binding import bind_cpus; "
            "from suite.instack.probe import cpus_allowed\n"
            "t = threading.Thread(target=time.sleep, args=(2,)); t.start()\n"
            "threads = bind_cpus(1, 2)\n"
            "print(threads, cpus_allowed(), sorted(os.sched_getaffinity(t.native_id)))")
    share = cpu_share(CORES, 1, 2, 2)  # slots [1, 2) of 2
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUITE_CPU_BIND": "cores"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    threads, allowed, thread_cpus = out.split(maxsplit=2)
    assert int(threads) == len(share) and parse_cpu_list(allowed) == set(share)
    assert thread_cpus.strip().replace(" ", "") == str(share).replace(" ", "")
    env["SUITE_CPU_BIND"] = "none"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[:2] == [str(len(share)), cpus_allowed()]  # not bound, but threads for its share


def test_srun_steps_leave_the_binding_to_the_ranks():
    spec = Process("rank-0", "node1", ["python", "train.py"], {"SUITE_CPU_BIND": "cores"}, "/run")
    assert "--cpu-bind=none" in slurm.srun_argv(spec, "step")
    unset = Process("r", "node1", ["x"], {}, "/run")
    assert not any(a.startswith("--cpu-bind") for a in slurm.srun_argv(unset, "step"))


def test_cluster_profile_sets_the_default_policy(tmp_path, monkeypatch, suite_cli):
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "bound.toml").write_text('cpu_bind = "numa"\n')
    (tmp_path / "typo.toml").write_text('cpu_bind = "sockets"\n')
    assert load_cluster("bound").cpu_bind == "numa"
    with pytest.raises(UsageError, match="cpu_bind must be one of none, cores, numa, gpu-affine"):
        load_cluster("typo")
    shown = suite_cli("run", "--dry-run", "--gpus-per-node", "2", "--cpu-bind", "cores", "--case", "pytorch-synthetic")
    assert shown.returncode == 0 and "SUITE_CPU_BIND=cores" in shown.stdout, shown.stdout + shown.stderr


def bindings(results) -> tuple[list[str], dict]:
    [record] = records_in(results)
    assert record["status"] == "ok", record["reason"]
    return [r["cpus"] for r in record["world"]["binding"]["ranks"]], record


def test_two_workers_bound_to_cores_each_run_on_their_share(suite_cli, pytorch_stack, tmp_path):
    """Each of two workers bound to its share of this machine's cores (one core each on two, a half
    each on more, the same one on a single core), with as many threads as its share has cores. Unbound, each
    has the runner's cores: started on one core, two workers share it, and the diagnosis says so."""
    done = suite_cli("run", "--case", "pytorch-synthetic", "--gpus-per-node", "2", "--cpu-bind", "cores",
                     "--telemetry-interval", "0", case_args=tiny("pytorch-synthetic"))
    assert done.returncode == 0, done.stdout + done.stderr
    cpus, record = bindings(suite_cli.results)
    assert record["world"]["binding"]["policy"] == "cores"
    assert [parse_cpu_list(c) for c in cpus] == [set(cpu_share(CORES, rank, rank + 1, 2)) for rank in (0, 1)], cpus
    assert record["repetitions"][0]["cpus"] == cpus
    assert record["config"]["reported_by_case"]["threads_per_worker"] == len(cpu_share(CORES, 0, 1, 2))
    assert "took turns" not in record["metrics"]["diagnosis"]["why"] or len(CORES) == 1
    for path in suite_cli.results.glob("*.json"):
        path.rename(tmp_path / path.name)
    os.sched_setaffinity(0, {CORES[-1]})  # the runner and what it starts inherit it (`taskset -c N make run`)
    try:
        done = suite_cli("run", "--case", "pytorch-synthetic", "--gpus-per-node", "2", "--telemetry-interval", "0",
                         case_args=tiny("pytorch-synthetic"))
    finally:
        os.sched_setaffinity(0, CORES)
    assert done.returncode == 0, done.stdout + done.stderr
    cpus, record = bindings(suite_cli.results)
    assert record["world"]["binding"]["policy"] == "none" and cpus == [str(CORES[-1])] * 2
    diagnosis = record["metrics"]["diagnosis"]
    assert diagnosis["figures"]["processes_per_core"] == 2 and diagnosis["hint"].startswith("a core or more for each")
    assert f"2 processes on 1 core of {record['world']['binding']['ranks'][0]['host']}: they took turns" in done.stdout
