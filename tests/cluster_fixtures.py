"""Real cluster services for the tests, started once per session on this machine and stopped at the
end: an sshd on loopback addresses (127.0.0.2, 127.0.0.3 play two hosts) with a host key and a
login key made for the session, and a one-node SLURM cluster (munged + slurmctld + slurmd) with its
own configuration, state, ports and munge socket.

Nothing outside the session's temporary folders is touched: ssh gets its settings through
SUITE_SSH_OPTIONS="-F <session ssh_config>" (known hosts, key and port there, not in ~/.ssh), SLURM
commands through SLURM_CONF. Missing Debian packages are installed by tools/install-test-deps.sh
(run by `make test`, and here once more if needed); the fixtures skip only when that is impossible.
At the end every daemon started here is stopped, and any process still carrying the session's
SLURM_CONF in its environment (job steps, slurmstepd) is killed."""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SSHD = "/usr/sbin/sshd"
SLURM_DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
SLURM_COMMANDS = ("sbatch", "salloc", "srun", "squeue", "scontrol", "scancel", "sinfo")
LOOPBACK_HOSTS = ("127.0.0.2", "127.0.0.3")


def ensure_installed(paths: tuple[str, ...], what: str) -> None:
    """Runs tools/install-test-deps.sh when something is missing; skips the test if still missing."""
    def missing():
        return [p for p in paths if not (Path(p).exists() if p.startswith("/") else shutil.which(p))]

    if missing():
        subprocess.run([str(ROOT / "tools" / "install-test-deps.sh")], capture_output=True, timeout=900, check=False)
    if still := missing():
        pytest.skip(f"{what} not available and could not be installed ({', '.join(still)}; "
                    "tools/install-test-deps.sh needs root or passwordless sudo and apt)")


def free_port(address: str = "127.0.0.1", also: tuple[str, ...] = ()) -> int:
    """A TCP port free on `address` and on every address in `also`."""
    while True:
        with socket.socket() as sock:
            sock.bind((address, 0))
            port = sock.getsockname()[1]
        try:
            for other in also:
                with socket.socket() as sock:
                    sock.bind((other, port))
            return port
        except OSError:
            continue


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def stop_group(popen: subprocess.Popen, grace: float = 10) -> None:
    """Ends a daemon started in its own session, and everything in its process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(popen.pid, sig)
        except ProcessLookupError:
            pass
        try:
            popen.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def processes_with_env(line: str) -> list[int]:
    """Pids of the processes whose environment holds `line` (e.g. SLURM_CONF=...), not this one."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if line.encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# --- sshd ---------------------------------------------------------------------------------------

@dataclass
class Sshd:
    folder: Path
    port: int
    config: Path  # the client's ssh_config
    log: Path
    popen: subprocess.Popen

    @property
    def options(self) -> str:
        return f"-F {self.config}"

    def sessions(self) -> dict[str, int]:
        """Connections accepted so far, per listening address (from sshd's verbose log)."""
        text = self.log.read_text(errors="replace")
        return {host: text.count(f" on {host} port {self.port}") for host in LOOPBACK_HOSTS}


def start_sshd(folder: Path) -> Sshd:
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "login_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    shutil.copy(folder / "login_key.pub", folder / "authorized_keys")
    port = free_port(LOOPBACK_HOSTS[0], LOOPBACK_HOSTS[1:])
    listen = "".join(f"ListenAddress {host}:{port}\n" for host in LOOPBACK_HOSTS)
    (folder / "sshd_config").write_text(
        f"{listen}HostKey {folder / 'host_key'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        f"PidFile {folder / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nLogLevel VERBOSE\nMaxStartups 100\nMaxSessions 100\n")
    host_key = " ".join((folder / "host_key.pub").read_text().split()[:2])
    (folder / "known_hosts").write_text("".join(f"[{host}]:{port} {host_key}\n" for host in LOOPBACK_HOSTS))
    config = folder / "ssh_config"
    config.write_text(
        f"Host {' '.join(LOOPBACK_HOSTS)}\n  Port {port}\n  IdentityFile {folder / 'login_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder (Debian creates it at boot)
    log = folder / "sshd.log"
    popen = subprocess.Popen([SSHD, "-D", "-f", str(folder / "sshd_config"), "-E", str(log)],
                             start_new_session=True, stdin=subprocess.DEVNULL)
    sshd = Sshd(folder, port, config, log, popen)
    try:
        wait_for(lambda: all(_ssh_ok(config, host) for host in LOOPBACK_HOSTS), 30, "sshd on the loopback hosts")
    except RuntimeError:
        stop_group(popen)
        raise
    return sshd


def _ssh_ok(config: Path, host: str) -> bool:
    done = subprocess.run(["ssh", "-F", str(config), host, "true"], capture_output=True, timeout=30,
                          stdin=subprocess.DEVNULL, check=False)
    return done.returncode == 0


@pytest.fixture(scope="session")
def loopback_sshd(tmp_path_factory):
    """An sshd for this user on 127.0.0.2 and 127.0.0.3; SUITE_SSH_OPTIONS points ssh at it."""
    ensure_installed((SSHD, "ssh", "ssh-keygen"), "OpenSSH (openssh-server, openssh-client)")
    sshd = start_sshd(tmp_path_factory.mktemp("sshd"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SUITE_SSH_OPTIONS", sshd.options)
        yield sshd
    stop_group(sshd.popen)
    assert not alive(sshd.popen.pid)


# --- SLURM --------------------------------------------------------------------------------------

@dataclass
class Slurm:
    folder: Path
    conf: Path
    node: str
    daemons: list[subprocess.Popen]

    def env_line(self) -> str:
        return f"SLURM_CONF={self.conf}"


def slurm_conf(folder: Path, node: str) -> str:
    ctld_port, slurmd_port = free_port(), free_port()
    while slurmd_port == ctld_port:
        slurmd_port = free_port()
    settings = {
        "ClusterName": "hpcdltest", "SlurmctldHost": f"{node}(127.0.0.1)", "SlurmctldPort": ctld_port,
        "SlurmdPort": slurmd_port, "AuthType": "auth/munge", "CredType": "cred/munge",
        "AuthInfo": f"socket={folder / 'munge.socket'}", "SlurmUser": "root", "SlurmdUser": "root",
        "StateSaveLocation": folder / "state", "SlurmdSpoolDir": folder / "spool",
        "SlurmctldPidFile": folder / "slurmctld.pid", "SlurmdPidFile": folder / "slurmd.pid",
        "SlurmctldLogFile": folder / "slurmctld.log", "SlurmdLogFile": folder / "slurmd.log",
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_CPU", "SchedulerType": "sched/backfill", "MpiDefault": "none",
        "JobAcctGatherType": "jobacct_gather/none", "AccountingStorageType": "accounting_storage/none",
        "ReturnToService": 2, "MinJobAge": 600, "KillWait": 5, "SchedulerParameters": "sched_interval=2",
        "SlurmdParameters": "config_overrides",  # at least 2 CPUs even on a smaller machine (tests use 2 tasks)
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += [f"NodeName={node} NodeAddr=127.0.0.1 CPUs={max(2, os.cpu_count() or 1)} State=UNKNOWN",
              "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]
    return "\n".join(lines) + "\n"


def start_slurm(folder: Path) -> Slurm:
    node = socket.gethostname()
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, node))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = open(folder / "daemons.out", "w")
    started: list[subprocess.Popen] = []

    def start(*argv):
        started.append(subprocess.Popen(list(argv), env=env, stdout=logs, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True))

    slurm = Slurm(folder, conf, node, started)
    try:
        start("/usr/sbin/munged", "--foreground", "--force", f"--socket={folder / 'munge.socket'}",
              f"--key-file={key}", f"--pid-file={folder / 'munged.pid'}", f"--seed-file={folder / 'munged.seed'}",
              f"--log-file={folder / 'munged.log'}")
        wait_for(lambda: (folder / "munge.socket").exists(), 30, "munged's socket")
        start("/usr/sbin/slurmctld", "-D", "-f", str(conf))
        start("/usr/sbin/slurmd", "-D", "-f", str(conf), "-N", node)
        wait_for(lambda: _node_idle(env, node), 90, f"SLURM node {node} idle (logs in {folder})")
    except BaseException:
        stop_slurm(slurm)
        raise
    return slurm


def _node_idle(env: dict, node: str) -> bool:
    shown = subprocess.run(["sinfo", "--noheader", "--nodes", node, "--format=%t"], env=env, capture_output=True,
                           text=True, timeout=30, check=False)
    return shown.returncode == 0 and shown.stdout.strip() == "idle"


def stop_slurm(slurm: Slurm) -> None:
    env = {**os.environ, "SLURM_CONF": str(slurm.conf)}
    if len(slurm.daemons) > 1 and slurm.daemons[1].poll() is None:  # slurmctld still there: cancel what is left
        subprocess.run(["scancel", f"--user={pwd.getpwuid(os.getuid()).pw_name}"], env=env, capture_output=True,
                       timeout=60, check=False)
    for popen in reversed(slurm.daemons):  # slurmd, slurmctld, then munged
        stop_group(popen)
    for pid in processes_with_env(slurm.env_line()):  # job steps and slurmstepd left behind, if any
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (this machine, all its CPUs); SLURM_CONF points the commands at it."""
    if os.getuid() != 0:
        pytest.skip("the test SLURM cluster runs slurmd as root (this user is not root)")
    ensure_installed((*SLURM_DAEMONS, *SLURM_COMMANDS), "SLURM and munge (slurmctld, slurmd, slurm-client, munge)")
    slurm = start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(slurm.conf))
            for name in [n for n in os.environ if n.startswith("SLURM_") and n != "SLURM_CONF"]:
                patch.delenv(name)  # a test session inside an allocation must not look like one
            yield slurm
    finally:
        stop_slurm(slurm)
    time.sleep(0.5)
    assert not [p for p in slurm.daemons if alive(p.pid)]
    assert not [pid for pid in processes_with_env(slurm.env_line()) if alive(pid)]


def main(argv: list[str]) -> int:
    """`python tests/cluster_fixtures.py sshd|slurm`: the same services for trying things by hand,
    until Ctrl-C (e.g. `make run CLUSTER=loopback-ssh` without a system sshd)."""
    import tempfile

    if argv not in (["sshd"], ["slurm"]):
        print("usage: python tests/cluster_fixtures.py sshd|slurm", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix=f"hpcdl-{argv[0]}-"))
    if argv[0] == "sshd":
        service = start_sshd(folder)
        print(f"sshd on {', '.join(LOOPBACK_HOSTS)} port {service.port}; in another shell:\n"
              f"  export SUITE_SSH_OPTIONS='{service.options}'", flush=True)
    else:
        service = start_slurm(folder)
        print(f"SLURM node {service.node} is up; in another shell:\n  export SLURM_CONF={service.conf}", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        print("Ctrl-C stops it", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        stop_group(service.popen) if argv[0] == "sshd" else stop_slurm(service)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
