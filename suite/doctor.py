"""`suite doctor [--cluster NAME]`: what a cluster profile needs on this machine and whether it is
there, one line each (`ok:` or `missing:`): the scheduler's commands, the runtime (container tool
and images, or local stacks), the cases' data, and that the hosts can be reached. Exit status 1 when
anything is missing; nothing is installed or started."""

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from suite import containers, paths
from suite.cases import known_cases, load_case
from suite.clusters import Cluster, load_cluster
from suite.errors import UsageError
from suite.hostfile import read_hostfile
from suite.stacks import find_installed, load_stack, local_prefix

SCHEDULER_COMMANDS = {"local": (), "ssh": ("ssh",), "slurm": ("sbatch", "squeue", "scontrol", "scancel", "srun")}
REACH_TIMEOUT_S = 15


def doctor(cluster_name: str | None, case_names: list[str] | None = None) -> int:
    cluster = load_cluster(cluster_name) if cluster_name else Cluster("localhost", paths.HOSTFILES / "localhost")
    cases = [load_case(name) for name in (case_names or known_cases())]
    print(f"cluster {cluster.name}: scheduler {cluster.scheduler}, runtime {cluster.runtime}"
          f"{' (an example profile: adapt it first)' if cluster.example else ''}")
    lines = [*scheduler_lines(cluster), *runtime_lines(cluster, cases), *data_lines(cluster, cases),
             *host_lines(cluster)]
    for line in lines:
        print(line)
    return 1 if any(line.startswith("missing:") for line in lines) else 0


def command_line(name: str, why: str) -> str:
    found = shutil.which(name)
    return f"ok: {name} ({found})" if found else f"missing: {name} on PATH ({why})"


def scheduler_lines(cluster: Cluster) -> list[str]:
    if cluster.scheduler not in SCHEDULER_COMMANDS:
        return [f"missing: scheduler {cluster.scheduler!r} is not one of {', '.join(SCHEDULER_COMMANDS)}"]
    lines = [command_line(c, f"scheduler {cluster.scheduler}") for c in SCHEDULER_COMMANDS[cluster.scheduler]]
    if cluster.scheduler == "slurm" and shutil.which("sinfo"):
        lines.append(slurm_controller_line(cluster))
    if cluster.slurm.get("modules"):
        lines.append("ok: environment modules (`module`)" if os.environ.get("MODULESHOME") or os.environ.get("LMOD_CMD")
                     else "missing: environment modules (`module`, for the profile's [slurm] modules): "
                          "MODULESHOME/LMOD_CMD unset")
    return lines


def slurm_controller_line(cluster: Cluster) -> str:
    partition = cluster.slurm.get("partition")
    argv = ["sinfo", "--noheader", "--format=%P %a %D %t"] + ([f"--partition={partition}"] if partition else [])
    try:
        shown = subprocess.run(argv, capture_output=True, text=True, timeout=REACH_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return "missing: SLURM controller (sinfo did not answer)"
    if shown.returncode != 0 or not shown.stdout.strip():
        detail = (shown.stderr.strip().splitlines() or ["no such partition"])[-1]
        return f"missing: SLURM partition {partition or '(default)'}: {detail}"
    return f"ok: SLURM answers: {'; '.join(shown.stdout.split(chr(10))[:3]).strip()}"


def runtime_lines(cluster: Cluster, cases: list) -> list[str]:
    stacks = sorted({case.stack for case in cases})
    if cluster.runtime == "apptainer":
        from suite.runtimes import apptainer

        tool = os.environ.get("SUITE_APPTAINER") or shutil.which("apptainer") or shutil.which("singularity")
        lines = [f"ok: apptainer ({tool})" if tool else "missing: apptainer (or singularity) on PATH (runtime apptainer)"]
        flavour = containers.pick_flavour(containers.host_gpus())
        for stack in stacks:
            image = apptainer.image_path(stack, flavour, cluster.container_dir)
            lines.append(f"ok: image {image}" if image.exists() else
                         f"missing: image {image} (make containers STACK={stack} FLAVOUR={flavour})")
        return lines
    if cluster.runtime == "docker":
        problem = containers.docker_engine_problem()
        return [f"missing: Docker engine ({problem})" if problem else "ok: Docker engine"]
    lines = []
    for name in stacks:
        stack = load_stack(name)
        lines.append(f"ok: stack {name} built at {local_prefix(stack)}" if find_installed(stack) else
                     f"missing: stack {name} at {local_prefix(stack)} (built on first use, or now: make install "
                     f"CASE=<a case of it>)")
    return lines


def data_lines(cluster: Cluster, cases: list) -> list[str]:
    data_dir = Path(cluster.data_dir or paths.data_dir())
    lines = []
    for case in cases:
        required = case.spec.get("data", {}).get("requires", [])
        if not required:
            continue
        missing = [rel for rel in required if not (data_dir / rel).exists()]
        lines.append(f"ok: data of {case.name} under {data_dir}" if not missing else
                     f"missing: data of {case.name} under {data_dir}: {missing[0]}"
                     f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''} "
                     f"(make data CASE={case.name}, SYNTHETIC=1 for a small set)")
    return lines


def host_lines(cluster: Cluster) -> list[str]:
    if cluster.scheduler == "slurm":
        return ["ok: hosts come from the SLURM allocation (no hostfile needed)"]
    hostfile = cluster.hostfile or paths.HOSTFILES / "localhost"
    try:
        hosts = [h.name for h in read_hostfile(hostfile)]
    except UsageError as exc:
        return [f"missing: hostfile: {exc}"]
    if cluster.scheduler != "ssh":
        return [f"ok: hostfile {hostfile} ({len(hosts)} host(s); scheduler {cluster.scheduler} runs on this machine)"]
    from suite.schedulers import ssh

    try:
        settings = ssh.settings(cluster)
    except UsageError as exc:
        return [f"missing: usable [ssh] settings: {exc}"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda host: reach_line(settings, host), hosts))


def reach_line(settings, host: str) -> str:
    from suite.schedulers import ssh

    if not settings.force and ssh.is_local(host):
        return f"ok: host {host} is this machine (started directly)"
    argv = settings.argv(host, "-o", "ConnectTimeout=10") + ["--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=REACH_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, FileNotFoundError) as exc:
        return f"missing: host {host} over ssh ({type(exc).__name__})"
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"missing: host {host} over ssh without a password: {detail}"
    return f"ok: host {host} reachable over ssh"
