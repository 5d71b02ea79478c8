"""A batch job SLURM ended (time limit, scancel, node failure): its state and reason read from scontrol's and
sacct's own text, the one line a record and the console give, and resume's plan naming the state
(suite/schedulers/slurm.py, suite/execution/resume.py)."""

import json
import subprocess
from pathlib import Path

import pytest

from suite.execution.plugins import BatchJob
from suite.execution.resume import why
from suite.inputs.hostfiles import Host, World
from suite.schedulers import slurm

# `scontrol show job --oneliner 41` on the tests' cluster (slurm 22.05) after the job's time limit, and after scancel.
SCONTROL_TIMEOUT = (
    "JobId=41 JobName=hpcdl-pytorch-synthetic UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901720 "
    "Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:26 TimeLimit=00:01:00 TimeMin=N/A "
    "SubmitTime=2026-11-27T01:55:02 EligibleTime=2026-11-27T01:55:02 Partition=debug AllocNode:Sid=h:1 "
    "NodeList=hpcdl-n1 BatchHost=hpcdl-n1 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 "
    "Command=/tmp/runs/R1/job.sbatch WorkDir=/tmp/runs/R1 StdOut=/tmp/runs/R1/job-41.out Power=\n")
SCONTROL_CANCELLED = SCONTROL_TIMEOUT.replace("JobState=TIMEOUT Reason=TimeLimit", "JobState=CANCELLED Reason=None") \
    .replace("TimeLimit=00:01:00", "TimeLimit=00:11:00")
# `sacct -j 77 --noheader --parsable2 --allocations -o State,Elapsed,NodeList,ExitCode,Reason,TimeLimit`
SACCT_NODE_FAIL = "NODE_FAIL|00:03:12|node[01-02]|0:0|NodeDown|01:00:00\n"
SACCT_CANCELLED = "CANCELLED by 0|00:00:09|node01|0:15|None|1-00:00:00\n"


def facts(info: dict, job_id: str) -> dict:
    return {"job_id": job_id, "state": info["JobState"], "reason": slurm.given(info.get("Reason")),
            "time_limit": slurm.given(info.get("TimeLimit"))}


def test_scontrol_s_time_limit_and_cancel_are_read_and_said_in_one_line():
    timeout = slurm.scontrol_info(SCONTROL_TIMEOUT)
    assert (timeout["JobState"], timeout["Reason"], timeout["TimeLimit"], timeout["NodeList"]) == (
        "TIMEOUT", "TimeLimit", "00:01:00", "hpcdl-n1")
    assert slurm.cut_message(facts(timeout, "41")) == ("SLURM job 41 ended TIMEOUT (time limit 1 min): resume "
                                                       "reruns this point")
    cancelled = slurm.scontrol_info(SCONTROL_CANCELLED)
    assert slurm.given(cancelled["Reason"]) is None
    assert slurm.cut_message(facts(cancelled, "41")) == "SLURM job 41 ended CANCELLED: resume reruns this point"


def test_sacct_s_states_are_read_in_scontrol_s_names():
    node_fail = slurm.sacct_info(SACCT_NODE_FAIL)
    assert (node_fail["JobState"], node_fail["NodeList"], node_fail["Reason"]) == ("NODE_FAIL", "node[01-02]",
                                                                                    "NodeDown")
    assert slurm.cut_message(facts(node_fail, "77")) == ("SLURM job 77 ended NODE_FAIL (reason NodeDown): resume "
                                                         "reruns this point")
    cancelled = slurm.sacct_info(SACCT_CANCELLED)
    assert (cancelled["JobState"], cancelled["TimeLimit"]) == ("CANCELLED", "1-00:00:00")
    assert slurm.sacct_info("") == {"JobState": "UNKNOWN"}


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "UNKNOWN", None])
def test_a_job_that_ended_by_itself_has_no_slurm_line(state):
    assert slurm.cut_message({"job_id": "5", "state": state, "reason": "NonZeroExitCode"}) is None


@pytest.mark.parametrize("limit, said", [("00:01:00", "1 min"), ("1", "1 min"), ("1:30", "1.5 min"),
                                         ("2-00", "2880 min"), ("1-01:00:00", "1500 min"), ("90", "90 min")])
def test_slurm_time_limits_in_minutes(limit, said):
    assert slurm.in_minutes(limit) == said


def test_an_unlimited_time_limit_is_said_as_slurm_says_it():
    assert slurm.cut_message({"job_id": "5", "state": "TIMEOUT", "reason": "TimeLimit", "time_limit": "UNLIMITED"}) \
        == "SLURM job 5 ended TIMEOUT (time limit UNLIMITED): resume reruns this point"


def job(tmp_path: Path) -> BatchJob:
    return BatchJob("R1", "pytorch-synthetic", World((Host("slurm-node-1", 1),), "sbatch"), ("python", "-m", "suite"),
                    300.0, 300.0, 1, tmp_path / "R1")


def submitted(monkeypatch, answer: str):
    monkeypatch.setattr(slurm.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "41\n", ""))
    monkeypatch.setattr(slurm, "follow", lambda job_id, run_dir, log, **kw: slurm.scontrol_info(answer))


def test_a_job_cut_by_its_time_limit_before_its_record_fails_with_slurm_s_state(tmp_path, monkeypatch):
    submitted(monkeypatch, SCONTROL_TIMEOUT)
    taken = slurm.take_over(job(tmp_path))
    assert taken.record is None and taken.hostnames == ["hpcdl-n1"]
    assert taken.failure.startswith("SLURM job 41 ended TIMEOUT (time limit 1 min): resume reruns this point; "
                                    "the job wrote no record (exit code 0:15); last output: ''; output: ")
    assert {k: taken.execution[k] for k in ("job_id", "state", "reason", "time_limit")} == {
        "job_id": "41", "state": "TIMEOUT", "reason": "TimeLimit", "time_limit": "00:01:00"}


def test_the_runner_s_own_record_of_slurm_s_sigterm_says_what_slurm_did(tmp_path, monkeypatch):
    submitted(monkeypatch, SCONTROL_CANCELLED)
    folder = tmp_path / "R1" / "record"

    def follow(job_id, run_dir, log, **kw):  # the job's runner wrote its failed record before it ended
        folder.mkdir()
        (folder / "R1.json").write_text(json.dumps({"status": "failed", "reason": "interrupted (SIGINT/SIGTERM on the "
                                                                                  "runner)"}))
        return slurm.scontrol_info(SCONTROL_CANCELLED)

    monkeypatch.setattr(slurm, "follow", follow)
    taken = slurm.take_over(job(tmp_path))
    assert taken.record["reason"] == ("SLURM job 41 ended CANCELLED: resume reruns this point; the run said: "
                                      "interrupted (SIGINT/SIGTERM on the runner)")
    assert (taken.execution["state"], taken.execution["reason"]) == ("CANCELLED", None)


def test_resume_names_the_slurm_state_a_point_ended_in(tmp_path):
    def record(run_id, devices, state=None, reason="rank-0 on n1 exited with 1"):
        slurm_facts = {"slurm": {"job_id": "41", "state": state}} if state else {}
        return ({"run_id": run_id, "status": "failed", "reason": reason, "world": {"nodes": 1, "devices": devices},
                 "execution": {"scheduler": "slurm" if state else "local", **slurm_facts}}, None)

    records = [record("A", 1, "TIMEOUT"), record("B", 2, "CANCELLED"), record("C", 3, "NODE_FAIL"),
               record("D", 4, "FAILED"), record("E", 5)]
    plan = {"points": [{"nodes": 1, "devices": d, "records": []} for d in range(1, 7)]}
    assert [why((1, d), records, plan) for d in range(1, 7)] == [
        "TIMEOUT: A", "CANCELLED: B", "NODE_FAIL: C", "failed: D: rank-0 on n1 exited with 1",
        "failed: E: rank-0 on n1 exited with 1", "never started"]
