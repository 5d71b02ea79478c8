import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from suite.base.errors import UsageError
from suite.base.paths import ROOT
from suite.execution.plan import Launch, StackEnv
from suite.inputs.hostfiles import Host, World
from suite.instack.cpu_binding import slots
from suite.launchers import horovod
from suite.schedulers import slurm


def test_plan_runs_one_horovodrun_over_all_hosts(tmp_path):
    world = World((Host("node1", 2), Host("node2", 2)), "hf")
    env = StackEnv(runtime="local", bin_dir="/stack/bin", env={"PYTHONPATH": "/suite"})
    plan = horovod.plan(Launch("/cases/x/train.py", ["--batch-size", "8"], world, env, str(tmp_path), "/data"))
    [process] = plan.processes
    assert process.argv == ["/stack/bin/horovodrun", "-np", "4", "-H", "node1:2,node2:2", "--gloo",
                            "/stack/bin/python", "/cases/x/train.py", "--batch-size", "8"]
    assert process.env == {"PYTHONPATH": "/suite", "SUITE_RUN_DIR": str(tmp_path), "SUITE_DATA_DIR": "/data",
                           "SUITE_NODES": "2", "SUITE_DEVICES": "4"}
    assert plan.details == {"launcher": "horovod", "controller": "gloo"}


def test_loopback_hosts_over_ssh_talk_over_the_loopback_interface(tmp_path):
    world = World((Host("127.0.0.2", 1), Host("127.0.0.3", 1)), "hf")
    env = StackEnv(runtime="local", bin_dir="/stack/bin")
    argv = horovod.plan(Launch("train.py", [], world, env, str(tmp_path), "/data", placement="ssh")).processes[0].argv
    assert argv[argv.index("--gloo") + 1:argv.index("--gloo") + 3] == ["--network-interfaces", "lo"]


@pytest.mark.parametrize("per_host", [1, 2, 3])
def test_horovodrun_on_hosts_of_this_machine_gives_each_rank_its_own_slot(monkeypatch, per_host):
    """horovodrun starts every worker of a loopback hostfile with one environment: each finds its host's
    first slot from its rank (ranks numbered host by host), so that the hosts' workers take distinct cores."""
    world = World((Host("127.0.0.2", per_host), Host("127.0.0.3", per_host)), "hf")
    launch = Launch("train.py", [], world, StackEnv("local", "/stack/bin"), "/runs/r", "/data", placement="ssh")
    [launcher] = horovod.plan(launch).processes
    for name in ("SUITE_SLOT_OFFSET", "SUITE_MACHINE_SLOTS"):
        monkeypatch.setenv(name, launcher.env[name])
    placed = [slots(local, per_host, host * per_host + local) for host in range(2) for local in range(per_host)]
    assert placed == [(k, k + 1, 2 * per_host) for k in range(2 * per_host)]  # every slot once, in rank order
    with pytest.raises(SystemExit, match="must pass its global rank"):  # a case that does not say its rank
        slots(0, per_host)


def test_horovodrun_across_other_machines_leaves_each_host_its_cores():
    world = World((Host("node1.invalid", 2), Host("node2.invalid", 2)), "hf")
    launch = Launch("train.py", [], world, StackEnv("local", "/stack/bin"), "/runs/r", "/data", placement="ssh")
    [launcher] = horovod.plan(launch).processes
    assert not {"SUITE_SLOT_OFFSET", "SUITE_MACHINE_SLOTS"} & set(launcher.env)


def test_container_runs_horovodrun_and_its_workers_inside_the_image():
    world = World((Host("localhost", 1),), "hf")
    env = StackEnv(runtime="apptainer", bin_dir="/opt/stack/bin", prefix=("apptainer", "exec", "img.sif"))
    argv = horovod.plan(Launch("train.py", [], world, env, "/run", "/data")).processes[0].argv
    assert argv[:4] == ["apptainer", "exec", "img.sif", "/opt/stack/bin/horovodrun"]
    assert argv[-2:] == ["/opt/stack/bin/python", "train.py"] and argv.count("apptainer") == 1


# --- horovodrun told what the stack's Horovod was built with -----------------------------------------

def test_horovodrun_is_told_the_controllers_the_stack_facts_name():
    world = World((Host("localhost", 2),), "hf")
    for facts, built in [({"horovod_gloo": True, "horovod_mpi": False}, "gloo"),
                         ({"horovod_gloo": True, "horovod_mpi": True}, "gloo,mpi")]:
        env = StackEnv(runtime="local", bin_dir="/stack/bin", facts=facts)
        argv = horovod.plan(Launch("train.py", [], world, env, "/run", "/data")).processes[0].argv
        assert argv[:5] == ["/stack/bin/python", "-m", "suite.launchers._horovodrun", built, "-np"]
        assert argv[-2:] == ["/stack/bin/python", "train.py"]


TINY_WORKER = "import horovod.torch as hvd; hvd.init(); print('size', hvd.size(), 'rank', hvd.rank())"


def test_horovodrun_takes_the_build_from_the_facts_it_is_given(pytorch_stack):
    """The real horovodrun: given "gloo" it starts the worker without asking the extension again;
    given a build without Gloo it refuses --gloo, which only the given facts can have told it."""
    python = str(pytorch_stack.python)
    base = [python, "-m", "suite.launchers._horovodrun"]
    args = ["-np", "1", "-H", "localhost:1", "--gloo", python, "-c", TINY_WORKER]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(python).parent}:{os.environ['PATH']}"}
    done = subprocess.run([*base, "gloo", *args], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "size 1 rank 0" in done.stdout
    refused = subprocess.run([*base, "mpi", *args], capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode != 0 and "Gloo support has not been built" in refused.stderr
    assert "size 1" not in refused.stdout


# --- ranks started by the scheduler (srun steps, loopback hosts): no horovodrun, no ssh ----------------

HOROVODRUN_ENV = """
import json, sys
from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
hosts = parse_hosts(sys.argv[1])
slots = get_host_assignments(hosts, sum(h.slots for h in hosts))
print(json.dumps([[create_slot_env_vars(s) for s in slots], create_run_env_vars("node1", ["eth0"], 1234)]))
"""


def launch_on(hosts, placement, facts=None, run_dir="/runs/r/rep-0") -> Launch:
    env = StackEnv(runtime="local", bin_dir="/stack/bin", env={"PYTHONPATH": "/suite"}, facts=facts or {})
    return Launch("/cases/x/train.py", ["--batch-size", "8"], World(hosts, "test"), env, run_dir, "/data",
                  placement=placement)


def test_under_srun_each_rank_gets_the_environment_horovodrun_gives(pytorch_stack):
    hosts = (Host("node1", 2), Host("node2", 1), Host("node3", 2))
    plan = horovod.plan(launch_on(hosts, "srun"))
    *ranks, rendezvous = plan.processes
    done = subprocess.run([str(pytorch_stack.python), "-c", HOROVODRUN_ENV, "node1:2,node2:1,node3:2"],
                          capture_output=True, text=True, check=True)
    slots, run_env = json.loads(done.stdout)
    assert [r.name for r in ranks] == ["rank-0", "rank-1", "rank-2", "rank-3", "rank-4"]
    assert [r.host for r in ranks] == ["node1", "node1", "node2", "node3", "node3"]
    assert [{k: r.env[k] for k in slot} for r, slot in zip(ranks, slots)] == slots
    port = plan.details["rendezvous"].split(":")[1]
    for rank in ranks:  # horovodrun's run environment, but the interface: Gloo picks the host name's address
        assert {k: rank.env.get(k) for k in run_env if "IFACE" not in k and "IFNAME" not in k} == \
            {**{k: v for k, v in run_env.items() if "IFACE" not in k and "IFNAME" not in k},
             "HOROVOD_GLOO_RENDEZVOUS_PORT": port}
        assert rank.argv == ["/stack/bin/python", "/cases/x/train.py", "--batch-size", "8"] and not rank.daemon
    assert rendezvous.daemon and rendezvous.host == "node1"
    assert rendezvous.argv == ["/stack/bin/python", "-m", "suite.launchers._horovod_rendezvous",
                               "node1:2,node2:1,node3:2", port]
    assert plan.ranks == 5 and plan.details["controller"] == "gloo"


def test_loopback_hosts_run_as_local_ranks_sharing_the_machine():
    plan = horovod.plan(launch_on((Host("127.0.0.1", 1), Host("127.0.0.2", 1)), "local"))
    assert [p.name for p in plan.processes] == ["rank-0", "rank-1", "rendezvous"]
    assert [p.env["SUITE_PROCESSES_ON_HOST"] for p in plan.processes[:2]] == ["2", "2"]
    assert [p.env["HOROVOD_HOSTNAME"] for p in plan.processes[:2]] == ["127.0.0.1", "127.0.0.2"]


def test_one_node_or_ssh_keeps_horovodrun():
    assert [p.name for p in horovod.plan(launch_on((Host("node1", 2),), "srun")).processes] == ["horovodrun"]
    assert [p.name for p in horovod.plan(launch_on((Host("n1", 1), Host("n2", 1)), "ssh")).processes] == ["horovodrun"]


def test_over_ssh_an_image_s_ranks_are_each_started_in_it():
    """horovodrun in a container would start the other hosts' workers outside it: with an image, the ssh
    scheduler starts every rank, each under the runtime's prefix, and the rendezvous server."""
    hosts = (Host("n1", 1), Host("n2", 1))
    launch = launch_on(hosts, "ssh")
    image = replace(launch, stack_env=replace(launch.stack_env, prefix=("apptainer", "exec", "/i.sif"),
                                              provenance={"image": "/i.sif"}))
    plan = horovod.plan(image)
    assert [(p.name, p.host) for p in plan.processes] == [("rank-0", "n1"), ("rank-1", "n2"), ("rendezvous", "n1")]
    assert all(p.argv[:3] == ["apptainer", "exec", "/i.sif"] for p in plan.processes)
    assert plan.details["controller"] == "gloo"


def test_mpi_under_srun_is_one_step_of_all_ranks():
    plan = horovod.plan(launch_on((Host("node1", 2), Host("node2", 2)), "srun", facts={"horovod_mpi": True}))
    [step] = plan.processes
    assert step.mpi_tasks == {"node1": 2, "node2": 2} and plan.details["controller"] == "mpi"
    argv = slurm.srun_argv(step, "hpcdl-x-ranks", "pmi2")
    assert argv[:7] == ["srun", "--overlap", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--nodelist=node1,node2",
                        "--mpi=pmi2"]
    assert argv[-4:] == ["/stack/bin/python", "/cases/x/train.py", "--batch-size", "8"]


def test_horovod_controller_picks_gloo_ranks_under_srun_or_is_refused(monkeypatch):
    """HOROVOD_CONTROLLER=gloo: Gloo ranks under srun though Horovod has MPI (an image whose MPI the site's
    srun cannot start); a controller Horovod lacks, or no controller, refused in one line."""
    mpi_built = {"horovod_mpi": True, "horovod_gloo": True}
    monkeypatch.setenv("HOROVOD_CONTROLLER", "gloo")
    plan = horovod.plan(launch_on((Host("node1", 1), Host("node2", 1)), "srun", facts=mpi_built))
    assert [p.name for p in plan.processes] == ["rank-0", "rank-1", "rendezvous"]
    assert plan.details["controller"] == "gloo" and "--gloo" in horovod.plan(
        launch_on((Host("node1", 2),), "srun", facts=mpi_built)).processes[0].argv
    monkeypatch.setenv("HOROVOD_CONTROLLER", "MPI")
    with pytest.raises(UsageError, match=r"^HOROVOD_CONTROLLER=mpi, but the stack's Horovod was built without mpi"):
        horovod.check(launch_on((Host("node1", 1), Host("node2", 1)), "srun", facts={"horovod_mpi": False}))
    monkeypatch.setenv("HOROVOD_CONTROLLER", "nccl")
    with pytest.raises(UsageError, match=r"^HOROVOD_CONTROLLER='nccl': Horovod's controllers are gloo and mpi$"):
        horovod.check(launch_on((Host("node1", 1), Host("node2", 1)), "srun", facts=mpi_built))


def test_a_host_elsewhere_under_the_local_scheduler_is_refused_with_the_way_out():
    with pytest.raises(UsageError, match=r"host node2\.invalid is not this machine: .*horovodrun would need ssh.*"
                                         r"SCHEDULER=ssh.*SCHEDULER=slurm.*HOSTFILE=hostfiles/loopback4"):
        horovod.check(launch_on((Host("localhost", 1), Host("node2.invalid", 1)), "local"))
    horovod.check(launch_on((Host("127.0.0.1", 1), Host("127.0.0.4", 1)), "local"))
