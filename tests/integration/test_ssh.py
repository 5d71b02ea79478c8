"""The ssh scheduler and the loopback-ssh cluster profile, against a real sshd on 127.0.0.2 and
127.0.0.3 (tests/support/cluster_fixtures.py) and the real stacks: quoting, ending a job on every host,
the ssh settings reaching launchers that ssh themselves, and 2-host runs of every case."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, installed_stack, records_in, tiny, tiny_tf_cifar_in_memory
from support.cluster_fixtures import LOOPBACK_HOSTS, alive, processes_with_env
from support.faults import BOUND_S

from suite import cli
from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster
from suite.execution.plan import Plan, Process
from suite.inputs.host_network import is_local
from suite.instack.cpu_binding import cpu_share
from suite.records.schema import validate
from suite.schedulers import ssh
from suite.schedulers.local import GRACE_S

PY = sys.executable
FORCED = Cluster("forced", Path("forced.toml"), plugins={"ssh": {"force": True}})
TORCH_TINY, MXNET_TINY = tiny("pytorch-synthetic"), tiny("mxnet-imagenet")
TF_TINY = tiny_tf_cifar_in_memory()
TWO_HOSTS = ("--nodes", "2", "--timeout", "300")
LOOPBACK_SSH = ("--cluster", "loopback-ssh", *TWO_HOSTS)
ECHO = "import json, os, sys; print(json.dumps([os.environ.get('V'), sys.argv[1:], os.getcwd()]), flush=True)"


def hostile(tmp_path: Path) -> str:
    pwned = tmp_path / "pwned"
    return f"x'; touch {pwned}; echo \"$(touch {pwned})\" `touch {pwned}` \\ $HOME ${{PATH}} * \nsecond line"


def job_processes(log_dir: Path) -> list[int]:
    return [pid for pid in processes_with_env(f"{ssh.JOB_MARKER}={log_dir.resolve()}") if alive(pid)]


# --- without an sshd ------------------------------------------------------------------------------

def test_remote_command_line_keeps_hostile_values_verbatim(tmp_path):
    value = hostile(tmp_path)
    spec = Process("p", "elsewhere", [PY, "-c", ECHO, value, "$(id)"], {"V": value}, str(tmp_path))
    done = subprocess.run(["sh", "-c", ssh.remote_command(spec, spec.env)], capture_output=True, text=True, cwd="/",
                          check=True)
    assert json.loads(done.stdout) == [value, [value, "$(id)"], str(tmp_path)]
    assert not (tmp_path / "pwned").exists()


def test_environment_names_that_are_no_shell_names_are_refused(tmp_path):
    spec = Process("p", "elsewhere", ["true"], {"A;B": "1"}, str(tmp_path))
    with pytest.raises(RuntimeError, match="cannot pass environment variable 'A;B' of p over ssh"):
        ssh.remote_command(spec, spec.env)


def test_which_hosts_are_this_machine():
    assert all(is_local(h) for h in ("localhost", os.uname().nodename, "127.0.0.1", "127.0.0.3"))
    assert not is_local("192.0.2.7")  # TEST-NET-1: not an address of this machine
    assert not is_local("no-such-host.invalid")


def test_settings_from_profile_and_environment(monkeypatch):
    monkeypatch.setenv("SUITE_SSH_OPTIONS", "-F '/tmp/a b/config' -o ConnectTimeout=5")
    cluster = Cluster("c", Path("c.toml"), plugins={"ssh": {"options": ["-p", "2222"], "user": "bench", "force": True}})
    settings = ssh.settings(cluster)
    assert settings.argv("node1") == ["ssh", "-o", "BatchMode=yes", "-l", "bench", "-p", "2222",
                                      "-F", "/tmp/a b/config", "-o", "ConnectTimeout=5", "node1"]
    assert settings.force
    for bad, message in (({"options": "-p 22"}, "options must be a list of strings"),
                         ({"user": "-oProxyCommand=x"}, "user must be a user name"),
                         ({"force": "yes"}, "force must be true or false")):
        with pytest.raises(UsageError, match=message):
            ssh.settings(Cluster("c", Path("c.toml"), plugins={"ssh": bad}))
    monkeypatch.setenv("SUITE_SSH_OPTIONS", "-F 'unclosed")
    with pytest.raises(UsageError, match=r"\$SUITE_SSH_OPTIONS cannot be split"):
        ssh.settings(None)


def test_bad_ssh_settings_are_refused_in_one_line_before_launch(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "hosts").write_text("127.0.0.2\n")
    (tmp_path / "bad.toml").write_text('hostfile = "hosts"\nscheduler = "ssh"\n[ssh]\noptions = "-p 22"\n')
    code = cli.main(["run", "--cluster", "bad", "--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "[ssh] options must be a list of strings" in err
    assert not (tmp_path / "runs").exists()


# --- the scheduler with a real sshd ---------------------------------------------------------------

def test_hostile_values_reach_the_remote_side_verbatim(loopback_sshd, tmp_path):
    value = hostile(tmp_path)
    plan = Plan(ranks=1, processes=(Process("echo", "127.0.0.3", [PY, "-c", ECHO, value, "$(id)"], {"V": value},
                                            str(tmp_path)),))
    before = loopback_sshd.sessions()["127.0.0.3"]
    [result] = ssh.execute(plan, tmp_path / "logs", timeout_s=60, cluster=FORCED)
    assert result.ok, result
    assert json.loads((tmp_path / "logs" / "echo.log").read_text()) == [value, [value, "$(id)"], str(tmp_path)]
    assert not (tmp_path / "pwned").exists()
    assert loopback_sshd.sessions()["127.0.0.3"] > before  # it did go through sshd


def test_a_failure_on_one_host_ends_the_job_on_every_host(loopback_sshd, tmp_path):
    # The sleeper starts a child in a session of its own: killing the ssh client or the process group
    # would leave it; the job marker reaches it.
    sleeper = ("import os, subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
               "time.sleep(600)'], start_new_session=True); print(os.getpid(), c.pid, flush=True); time.sleep(600)")
    plan = Plan(ranks=2, processes=(
        Process("sleeper", "127.0.0.2", [PY, "-c", sleeper], {}, str(tmp_path)),
        Process("crasher", "127.0.0.3", [PY, "-c", "import time; time.sleep(3); raise SystemExit(3)"], {},
                str(tmp_path))))
    started = time.monotonic()
    sleeper_result, crasher_result = ssh.execute(plan, tmp_path / "logs", timeout_s=300, cluster=FORCED)
    assert time.monotonic() - started < BOUND_S  # the crash at 3 s ends every host's processes within the bound
    assert crasher_result.returncode == 3 and crasher_result.reason is None
    assert sleeper_result.reason == "ended because crasher failed"
    remote_pids = [int(pid) for pid in sleeper_result.tail[0].split()]
    time.sleep(0.5)
    assert not [pid for pid in remote_pids if alive(pid)]
    assert job_processes(tmp_path / "logs") == []


def test_a_remote_child_without_the_marker_in_a_group_of_its_own_ends_with_the_job(loopback_sshd, tmp_path):
    """As Apptainer's squashfuse_ll: a group of its own and an environment without the job's marker, beside a
    parent that outlives SIGTERM (a starter still cleaning up): the final sweep reaches it by its session."""
    parent = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], env={}, "
              "preexec_fn=os.setpgrp); time.sleep(0.5); marked = b'SUITE_JOB=' in open(f'/proc/{c.pid}/environ', 'rb')"
              ".read(); print(os.getpid(), c.pid, os.getpgid(c.pid), os.getpgid(0), int(marked), flush=True); "
              "time.sleep(600)")
    plan = Plan(ranks=2, processes=(
        Process("parent", "127.0.0.2", [PY, "-c", parent], {}, str(tmp_path)),
        Process("crasher", "127.0.0.3", [PY, "-c", "import time; time.sleep(3); raise SystemExit(3)"], {},
                str(tmp_path))))
    parent_result, _ = ssh.execute(plan, tmp_path / "logs", timeout_s=300, cluster=FORCED)
    parent_pid, child, child_group, parent_group, marked = map(int, parent_result.tail[0].split())
    try:
        assert child_group != parent_group and not marked  # positive control: out of reach but for its session
        time.sleep(0.5)
        assert not alive(parent_pid) and not alive(child)
    finally:
        for pid in (parent_pid, child):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_time_limit_ends_remote_processes(loopback_sshd, tmp_path):
    slow = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
    plan = Plan(ranks=1, processes=(Process("slow", "127.0.0.2", [PY, "-c", slow], {}, str(tmp_path)),))
    limit, seen = 5, set()
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(ssh.execute, plan, tmp_path / "logs", timeout_s=limit, cluster=FORCED)
        while not running.done() and not seen:  # positive control: the job's remote process, seen by its marker
            seen = set(job_processes(tmp_path / "logs"))
            time.sleep(0.1)
        [result] = running.result()
    elapsed = time.monotonic() - started
    assert result.reason == f"time limit of {limit} s reached"
    assert limit <= elapsed < limit + GRACE_S + 5
    assert int(result.tail[0]) in seen  # the sleeper itself carried the marker while it ran
    time.sleep(0.5)
    assert job_processes(tmp_path / "logs") == [] and not [pid for pid in seen if alive(pid)]


def test_launchers_that_ssh_themselves_get_the_profiles_options(loopback_sshd, tmp_path):
    # Run here (not forced), this process is a stand-in for horovodrun: a plain `ssh HOST` from it
    # reaches the test sshd only with the options of the profile and $SUITE_SSH_OPTIONS.
    plan = Plan(ranks=1, processes=(Process("launcher", "localhost", ["ssh", "127.0.0.3", "echo", "reached"], {},
                                            str(tmp_path)),))
    [result] = ssh.execute(plan, tmp_path / "logs", timeout_s=60,
                           cluster=Cluster("c", Path("c.toml"),
                                           plugins={"ssh": {"options": ["-o", "ConnectTimeout=10"]}}))
    assert result.ok and result.tail == ["reached"], result


# --- real runs of the cases over ssh on two hosts ------------------------------------------------

@pytest.fixture(scope="module")
def mxnet_data(tmp_path_factory) -> Path:
    installed_stack("mxnet")
    folder = tmp_path_factory.mktemp("mxnet-data")
    subprocess.run([PY, "-m", "suite", "data", "--case", "mxnet-imagenet", "--synthetic", "--data-dir", str(folder),
                    "--", "--classes", "3", "--train-per-class", "8", "--val-per-class", "2", "--num-thread", "2"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    return folder


def with_site_env(folder: Path) -> Path:
    """loopback-ssh's profile and hostfile copied into `folder` (a site's own profile, given by its path), the
    profile setting RDMAV_FORK_SAFE (libibverbs), a name the environment policy does not forward by itself."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(paths.HOSTFILES / "loopback-ssh", folder)
    profile = folder / "loopback-ssh.toml"
    profile.write_text((paths.HOSTFILES / "loopback-ssh.toml").read_text() + '\n[env]\nRDMAV_FORK_SAFE = "1"\n')
    return profile


def checked_run(suite_cli, sshd, *args, case_args) -> tuple[dict, dict]:
    """Runs the case over loopback-ssh, its profile given by its path with an [env]; its record (checked, every
    rank having seen the profile's variable) and the ssh sessions it opened per host."""
    before = sshd.sessions()
    profile = with_site_env(suite_cli.results.parent / "profile")
    result = suite_cli("run", "--cluster", str(profile), *TWO_HOSTS, *args, case_args=case_args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok" and record["world"]["hosts"] == list(LOOPBACK_HOSTS)
    assert record["world"]["cluster"] == "loopback-ssh" and record["execution"]["scheduler"] == "ssh"
    assert record["execution"]["cluster_env"] == {"RDMAV_FORK_SAFE": "1"}
    assert record["execution"]["cluster_env_not_seen"] == [], record["execution"]["cluster_env_not_seen"]
    if "--no-precheck" not in args:  # the interconnect check before it ran over ssh too
        check = record["metrics"]["interconnect"]
        assert (check["status"], check["nodes"]) == ("ok", 2), check
    logs = Path(record["repetitions"][0]["run_dir"]) / "logs"
    time.sleep(0.5)
    assert job_processes(logs) == []
    opened = {host: count - before[host] for host, count in sshd.sessions().items()}
    return record, opened


def test_pytorch_synthetic_on_two_hosts(suite_cli, loopback_sshd, pytorch_stack):
    record, opened = checked_run(suite_cli, loopback_sshd, case_args=TORCH_TINY)
    assert [(p["name"], p["host"]) for p in record["repetitions"][0]["processes"]] == [("horovodrun", "127.0.0.2")]
    assert record["metrics"]["throughput"]["n"] == 3 and record["world"]["devices"] == 2
    # both hosts are this machine: rank 0 computes with its half of the cores (the whole of them oversubscribed it)
    assert record["config"]["reported_by_case"]["threads_per_worker"] == len(cpu_share(sorted(os.sched_getaffinity(0)),
                                                                                       0, 1, 2))
    # horovodrun, started on 127.0.0.2 over ssh, reached 127.0.0.3 over ssh itself for its worker.
    assert opened["127.0.0.2"] >= 1 and opened["127.0.0.3"] >= 1


def test_mxnet_imagenet_spreads_ps_lite_over_two_hosts(suite_cli, loopback_sshd, mxnet_data, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # passed on to the remote processes, as a record's environment
    record, opened = checked_run(suite_cli, loopback_sshd, "--case", "mxnet-imagenet", "--data-dir", str(mxnet_data),
                                 case_args=MXNET_TINY)
    placed = [(p["name"], p["host"]) for p in record["repetitions"][0]["processes"]]
    assert placed == [("worker-0", "127.0.0.2"), ("worker-1", "127.0.0.3"), ("server-0", "127.0.0.2"),
                      ("server-1", "127.0.0.3"), ("scheduler", "127.0.0.2")]
    assert record["execution"]["kvstore"] == "auto" and record["execution"]["servers"] == 2
    assert opened["127.0.0.2"] >= 3 and opened["127.0.0.3"] >= 2


def test_tf_cifar_multi_worker_on_two_hosts(suite_cli, loopback_sshd):
    installed_stack("tensorflow")
    record, opened = checked_run(suite_cli, loopback_sshd, "--case", "tf-cifar", case_args=TF_TINY)
    assert record["execution"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert record["repetitions"][0]["exit_codes"] == {"worker-0": 0, "worker-1": 0}
    assert [p["host"] for p in record["repetitions"][0]["processes"]] == list(LOOPBACK_HOSTS)
    assert opened["127.0.0.2"] >= 1 and opened["127.0.0.3"] >= 1


def test_jax_gpt_joins_its_processes_over_two_hosts(suite_cli, loopback_sshd):
    """jaxdist over ssh: one process per host, the coordinator on the first; sharded over both (fsdp)."""
    installed_stack("jax")
    record, opened = checked_run(suite_cli, loopback_sshd, "--case", "jax-gpt", "--no-precheck",
                                 case_args=(*tiny("jax-gpt"), "--parallel", "fsdp"))
    placed = [(p["name"], p["host"]) for p in record["repetitions"][0]["processes"]]
    assert placed == [("rank-0", "127.0.0.2"), ("rank-1", "127.0.0.3")]
    assert record["execution"]["coordinator"].startswith("127.0.0.2:")
    assert record["config"]["reported_by_case"]["processes"] == 2 and record["metrics"]["throughput"]["n"] == 3
    assert opened["127.0.0.2"] >= 1 and opened["127.0.0.3"] >= 1


@pytest.mark.parametrize("fault", ["a remote worker dies", "the runner is stopped"])
def test_a_fault_ends_the_job_on_every_host(loopback_sshd, pytorch_stack, tmp_path, fault):
    from support.faults import failed_record_after, start_run, wait_for_ranks
    from test_faults import LONG

    runner = start_run(tmp_path, *LOOPBACK_SSH, case_args=LONG)
    pids = wait_for_ranks(tmp_path, 2)
    [log_dir] = tmp_path.glob("runs/*/rep-0/logs")
    assert set(pids.values()) <= set(job_processes(log_dir))  # the workers horovodrun started carry the marker
    assert all(alive(pid) for pid in pids.values())
    if fault == "a remote worker dies":
        os.kill(pids[1], signal.SIGKILL)
    else:
        runner.send_signal(signal.SIGTERM)
    record = failed_record_after(
        runner, tmp_path, leftovers=lambda: job_processes(log_dir) + [pid for pid in pids.values() if alive(pid)])
    assert record["reason"].startswith("repetition 0: horovodrun on 127.0.0.2" if fault == "a remote worker dies"
                                       else "interrupted")


def test_dry_run_prints_every_process_and_its_ssh_command(suite_cli, loopback_sshd, pytorch_stack):
    result = suite_cli("run", *LOOPBACK_SSH, "--dry-run", case_args=TORCH_TINY)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "process horovodrun on 127.0.0.2" in out and "-H 127.0.0.2:1,127.0.0.3:1" in out
    assert "SUITE_RUN_DIR=" in out and "PYTHONPATH=" in out
    assert "horovodrun (over ssh): ssh -o BatchMode=yes" in out and "127.0.0.2 -- 'cd " in out
    assert "dry run: nothing was started and no record was written" in out
    assert not suite_cli.runs.exists() and not suite_cli.results.exists()


def test_doctor_names_what_is_there_and_what_is_missing(loopback_sshd, monkeypatch):
    def doctor():
        return subprocess.run([PY, "-m", "suite", "doctor", "--cluster", "loopback-ssh", "--case", "pytorch-synthetic"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    found = doctor()
    assert "ok: host 127.0.0.2 reachable over ssh" in found.stdout
    assert "ok: host 127.0.0.3 reachable over ssh" in found.stdout
    assert "ok: ssh (" in found.stdout
    monkeypatch.setenv("SUITE_SSH_OPTIONS", f"{loopback_sshd.options} -p 9")  # nothing listens on port 9
    lost = doctor()
    assert lost.returncode == 1 and "missing: host 127.0.0.3 over ssh without a password" in lost.stdout
    assert all(line.startswith(("ok: ", "missing: ", "cluster ", "network links of this machine: ",
                                "NCCL's files on this machine: ")) for line in lost.stdout.splitlines())


def test_the_gpus_of_each_host_are_read_over_ssh(loopback_sshd):
    """The probe runs on each host over ssh (forced: these hosts are this machine, so what they report
    is what this host has, its GPUs and its network interfaces); a host that cannot be reached is not known,
    not refused."""
    from suite.execution.run import HOST_PROBE
    from suite.inputs.host_gpus import count_from_probe, host_gpus
    from suite.inputs.host_network import devices_from_probe

    out = ssh.run_on_hosts([*LOOPBACK_HOSTS, "127.0.0.9"], HOST_PROBE, FORCED)
    assert all(out[host] is not None and "CUDA_VISIBLE_DEVICES=" in out[host] for host in LOOPBACK_HOSTS), out
    assert {count_from_probe(out[host]) for host in LOOPBACK_HOSTS} == {host_gpus()}
    here = sorted(name for _, name in socket.if_nameindex())
    assert all(sorted(devices_from_probe(out[host])) == here for host in LOOPBACK_HOSTS), out
    fabric = devices_from_probe(subprocess.run(list(HOST_PROBE), capture_output=True, text=True, timeout=60).stdout,
                                "fabric")  # the probe's Slingshot and EFA lines came through ssh's quoting
    assert fabric is not None and all(devices_from_probe(out[host], "fabric") == fabric for host in LOOPBACK_HOSTS)
    assert all(f"\n{line}" in out[host] for line in ("efa devices=", "cxi devices=") for host in LOOPBACK_HOSTS)
    # Processes the tests start over ssh see no GPU, as the local ones do (unless SUITE_TEST_ON_GPUS=1).
    hidden = os.environ.get("SUITE_TEST_ON_GPUS") != "1"
    assert all(("CUDA_VISIBLE_DEVICES=" in out[host].splitlines()) == hidden for host in LOOPBACK_HOSTS), out
    assert out["127.0.0.9"] is None
    sessions = loopback_sshd.sessions()
    assert all(sessions[host] > 0 for host in LOOPBACK_HOSTS)
