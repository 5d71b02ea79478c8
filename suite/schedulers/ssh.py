"""Runs each process of a plan on its host: directly where the host is this machine, over ssh where
it is another one (or always, with the cluster profile's `[ssh] force = true`). The local
scheduler's machinery does the rest: output per process in log_dir/<name>.log, exit codes, the first
failure or a limit ends every process of the plan.

A remote process is started as `ssh -o BatchMode=yes [options] HOST -- 'cd RUN_DIR && export K=V ...
&& exec ARGV'`: the run directory must be at the same path on every host (a shared filesystem, as
clusters have), and the remote login shell must be a POSIX shell. Every value is quoted with
shlex.quote, so it reaches the remote side verbatim. Besides the plan's environment, the variables
of the runner's environment that tune frameworks (the ones a record keeps, e.g. OMP_*, NCCL_*) are
passed.

Ending a job: every process started for it carries SUITE_JOB=<log dir> in its environment, and so
does everything it starts (horovodrun passes its environment on to the workers it starts). To end
the job on a host, one more ssh signals every process of the user there whose environment has that
marker: this reaches what a remote process started in other process groups or sessions, which
killing the ssh client alone would leave running.

ssh options: the profile's `[ssh] options` (a list of ssh arguments) and `user`, then
$SUITE_SSH_OPTIONS (shell-like words, for per-user settings such as `-F ~/my_ssh_config`). When
there are any, the processes get an `ssh` on their PATH that adds them, so launchers that ssh to
hosts themselves (horovodrun, mpirun) use the same settings."""

import os
import shlex
import shutil
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from suite.base.env_policy import forwarded_env, masked_env
from suite.base.errors import UsageError
from suite.execution.plan import Plan, Process, ProcessResult
from suite.execution.plugins import BatchJob, Setting, command_line, output_here
from suite.inputs.host_network import is_local
from suite.inputs.hostfiles import profile_hostfile, read_hostfile
from suite.schedulers.local import Placement, run_plan

PROFILE = {
    "options": Setting(list, [], "ssh arguments, e.g. [\"-p\", \"2222\"]"),
    "user": Setting(str, None, "user name on the hosts"),
    "force": Setting(bool, False, "use ssh even for hosts that are this machine"),
}

OPTIONS_ENV = "SUITE_SSH_OPTIONS"
JOB_MARKER = "SUITE_JOB"
SWEEP_TIMEOUT_S = 15  # per host and signal: TERM + KILL stay well inside the 60 s bound
REACH_TIMEOUT_S = 15
# Signals every process of this user whose environment holds the line "$1" (e.g. SUITE_JOB=...); KILL also
# every process in their sessions, as the local scheduler's does: one that left its group with an environment
# of its own (Apptainer's squashfuse_ll) is there.
SWEEP = ('for f in $(grep -lzxF -- "$1" /proc/[0-9]*/environ 2>/dev/null); do p=${f#/proc/}; p=${p%/environ}; '
         '[ "$2" = KILL ] && s="$s $(sed "s/.*) //" "/proc/$p/stat" 2>/dev/null | cut -d" " -f4)"; '
         'kill -s "$2" "$p" 2>/dev/null; done; for x in $s; do pkill -KILL -s "$x" 2>/dev/null; done; true')


@dataclass(frozen=True)
class SshSettings:
    options: tuple[str, ...] = ()
    user: str | None = None
    force: bool = False

    def argv(self, host: str, *extra: str) -> list[str]:
        user = ["-l", self.user] if self.user else []
        return ["ssh", "-o", "BatchMode=yes", *extra, *user, *self.options, host]


def settings(cluster=None) -> SshSettings:
    """The cluster profile's [ssh] table and $SUITE_SSH_OPTIONS, checked (UsageError when malformed)."""
    spec = cluster.section("ssh") if cluster else {}
    where = f"cluster profile {cluster.path}: [ssh]" if cluster else "[ssh]"
    options = spec.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise UsageError(f"{where} options must be a list of strings (ssh arguments), e.g. [\"-p\", \"2222\"]")
    user = spec.get("user")
    if user is not None and (not isinstance(user, str) or not user or user.startswith("-") or user.strip() != user):
        raise UsageError(f"{where} user must be a user name, got {user!r}")
    force = spec.get("force", False)
    if not isinstance(force, bool):
        raise UsageError(f"{where} force must be true or false, got {force!r}")
    try:
        extra = shlex.split(os.environ.get(OPTIONS_ENV, ""))
    except ValueError as exc:
        raise UsageError(f"${OPTIONS_ENV} cannot be split into words: {exc}") from None
    expanded = tuple(os.path.expanduser(o) for o in [*options, *extra])
    return SshSettings(expanded, user, force)


def check(cluster, dry_run: bool = False) -> None:
    settings(cluster)
    if not dry_run and not shutil.which("ssh"):
        raise UsageError("SCHEDULER=ssh needs the `ssh` client on PATH (Debian: apt-get install openssh-client)")


def remote_command(spec: Process, env: dict, path_prefix: str | None = None) -> str:
    """The shell command line the remote login shell runs: every value quoted, nothing expanded
    except $PATH where a directory is put in front of it."""
    bad = [k for k in env if not k.isidentifier() or not k.isascii()]
    if bad:
        raise RuntimeError(f"cannot pass environment variable {bad[0]!r} of {spec.name} over ssh (not a shell name)")
    steps = [f"cd {shlex.quote(os.path.abspath(spec.cwd))}"]
    if path_prefix:
        steps.append(f"export PATH={shlex.quote(path_prefix)}:\"$PATH\"")
    if env:
        steps.append("export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()))
    return " && ".join([*steps, f"exec {shlex.join(spec.argv)}"])


class SshPlacement(Placement):
    def __init__(self, ssh: SshSettings, log_dir: Path, write_shim: bool = True):
        self.ssh = ssh
        self.job = str(log_dir.resolve())
        self.marker = f"{JOB_MARKER}={self.job}"
        self.shim_dir = log_dir.resolve() / ".ssh-bin" if ssh.options or ssh.user else None
        if self.shim_dir and write_shim:
            write_ssh_shim(self.shim_dir, ssh)

    def remote(self, spec: Process) -> bool:
        return self.ssh.force or not is_local(spec.host)

    def env(self, spec: Process) -> dict:
        return {**spec.env, JOB_MARKER: self.job}

    def popen_args(self, spec: Process) -> tuple[list[str], dict, str | None]:
        if not self.remote(spec):
            env = {**os.environ, **self.env(spec)}
            if self.shim_dir:
                env["PATH"] = f"{self.shim_dir}{os.pathsep}{env.get('PATH', '')}"
            return spec.argv, env, spec.cwd
        command = remote_command(spec, {**forwarded_env(os.environ, remote=True), **self.env(spec)},
                                 str(self.shim_dir) if self.shim_dir else None)
        return [*self.ssh.argv(spec.host), "--", command], dict(os.environ), None

    def signal(self, running: list, sig: int) -> None:
        """Local processes: their process group. Remote ones: every process of the job on their
        host; their ssh clients then end by themselves (and are killed with the rest at the end)."""
        remote = [r for r in running if self.remote(r.spec)]
        direct = [r for r in running if r not in remote or sig == signal.SIGKILL]
        super().signal(direct, sig)
        self.sweep({r.spec.host for r in remote}, sig)

    def sweep(self, hosts: set[str], sig: int) -> None:
        name = signal.Signals(sig).name.removeprefix("SIG")
        command = f"sh -c {shlex.quote(SWEEP)} sweep {shlex.quote(self.marker)} {name}"
        threads = [threading.Thread(target=_quiet_run,
                                    args=(self.ssh.argv(h, "-o", "ConnectTimeout=10") + ["--", command],))
                   for h in sorted(hosts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def _quiet_run(argv: list[str]) -> None:
    try:
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=SWEEP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pass


def write_ssh_shim(folder: Path, ssh: SshSettings) -> None:
    """A folder with an `ssh` that adds the cluster's options, for the PATH of launchers."""
    real = shutil.which("ssh") or "/usr/bin/ssh"
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "ssh"
    user = ["-l", ssh.user] if ssh.user else []
    shim.write_text("#!/bin/sh\n# ssh with the cluster profile's options (written by suite/schedulers/ssh.py)\n"
                    f"exec {shlex.join([real, '-o', 'BatchMode=yes', *user, *ssh.options])} \"$@\"\n")
    shim.chmod(0o755)


def execute(plan: Plan, log_dir: Path, timeout_s: float, stall_s: float | None = None,
            cluster=None) -> list[ProcessResult]:
    log_dir.mkdir(parents=True, exist_ok=True)
    return run_plan(plan, log_dir, timeout_s, stall_s, SshPlacement(settings(cluster), log_dir))


def placement(cluster) -> str:
    return "ssh"


def how_started(process: Process, cluster) -> str:
    return "ssh" if settings(cluster).force or not is_local(process.host) else "local"


def describe(plan: Plan, job: BatchJob) -> str:
    """For --dry-run: the command that starts each process (ssh for remote hosts)."""
    placement = SshPlacement(settings(job.profile), Path(plan.processes[0].cwd) / "logs", write_shim=False)
    lines = []
    for spec in plan.processes:
        where = "over ssh" if placement.remote(spec) else "here"
        shown = Process(spec.name, spec.host, spec.argv, masked_env(spec.env), spec.cwd)
        lines.append(f"  {spec.name} ({where}): {shlex.join(placement.popen_args(shown)[0])}")
    return "started as:\n" + "\n".join(lines)


def doctor_lines(cluster) -> list[str]:
    """The ssh client, and each host of the hostfile reachable without a password."""
    lines = [command_line("ssh", "scheduler ssh")]
    try:
        hosts = [h.name for h in read_hostfile(profile_hostfile(cluster))]
        ssh = settings(cluster)
    except UsageError as exc:
        return [*lines, f"missing: {exc}"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return [*lines, *pool.map(lambda host: reach_line(ssh, host), hosts)]


def run_on_hosts(hosts: list[str], argv: tuple[str, ...], cluster) -> dict[str, str | None]:
    """Hosts that are this machine run it here, the others over ssh, all at once."""
    ssh = settings(cluster)

    def one(host: str) -> str | None:
        if not ssh.force and is_local(host):
            return output_here(argv)
        return output_here([*ssh.argv(host, "-o", "ConnectTimeout=10"), "--", shlex.join(argv)], REACH_TIMEOUT_S * 4)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(hosts, pool.map(one, hosts)))


def reach_line(ssh: SshSettings, host: str) -> str:
    if not ssh.force and is_local(host):
        return f"ok: host {host} is this machine (started directly)"
    argv = ssh.argv(host, "-o", "ConnectTimeout=10") + ["--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=REACH_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, FileNotFoundError) as exc:
        return f"missing: host {host} over ssh ({type(exc).__name__})"
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"missing: host {host} over ssh without a password: {detail}"
    return f"ok: host {host} reachable over ssh"
