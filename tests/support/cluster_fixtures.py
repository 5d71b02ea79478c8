"""Real cluster services for the tests, started once per session on this machine and stopped at the
end: an sshd on loopback addresses (127.0.0.2, 127.0.0.3 play two hosts) with a host key and a
login key made for the session, a one-node SLURM cluster (munged + slurmctld + slurmd) with its
own configuration, state, ports and munge socket, and a two-node one whose nodes are network
namespaces with their own addresses and host names (slurm_two_nodes).

Nothing outside the session's temporary folders is touched: ssh gets its settings through
SUITE_SSH_OPTIONS="-F <session ssh_config>" (known hosts, key and port there, not in ~/.ssh), SLURM
commands through SLURM_CONF. Missing Debian packages are installed by tools/install-test-deps.sh
(run by `make test`, and here once more if needed). When a component cannot be set up the fixtures
skip, saying why, or fail under CI=true (conftest.component_unavailable). SUITE_TEST_SSHD,
SUITE_TEST_MUNGED, SUITE_TEST_SLURMCTLD and SUITE_TEST_SLURMD point them at other binaries.
At the end every daemon started here is stopped, and any process still carrying the session's
SLURM_CONF in its environment (job steps, slurmstepd) is killed; the two-node cluster's namespaces,
bridge and links (a private 10.213.X.0/24 picked by the session, the only addresses its traffic
uses) are deleted."""

import os
import pwd
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import component_unavailable

from support.processes import alive

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = {"sshd": "/usr/sbin/sshd", "munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld",
           "slurmd": "/usr/sbin/slurmd"}
SLURM_COMMANDS = ("sbatch", "salloc", "srun", "squeue", "scontrol", "scancel", "sinfo")
LOOPBACK_HOSTS = ("127.0.0.2", "127.0.0.3")


def daemon(name: str) -> str:
    """The daemon's binary: $SUITE_TEST_<NAME> (e.g. SUITE_TEST_SSHD) or where Debian installs it."""
    return os.environ.get(f"SUITE_TEST_{name.upper()}", DAEMONS[name])


def root_prefix() -> list[str] | None:
    """How to run a command as root: as is (root), through `sudo -n` (passwordless sudo), or None."""
    if os.getuid() == 0:
        return []
    sudo = shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False)
    return ["sudo", "-n"] if sudo and sudo.returncode == 0 else None


def ensure_installed(paths: tuple[str, ...], what: str) -> None:
    """Runs tools/install-test-deps.sh when something of Debian's is missing; if something is still
    missing the test is skipped (failed under CI=true), saying what."""
    chosen = {os.environ[f"SUITE_TEST_{n.upper()}"]: f"SUITE_TEST_{n.upper()}" for n in DAEMONS
              if f"SUITE_TEST_{n.upper()}" in os.environ}

    def missing():
        return [p for p in paths if not (Path(p).exists() if p.startswith("/") else shutil.which(p))]

    if [p for p in missing() if p not in chosen]:
        subprocess.run([str(ROOT / "tools" / "install-test-deps.sh")], capture_output=True, timeout=900, check=False)
    if still := missing():
        named = [f"{p} (from {chosen[p]})" if p in chosen else p for p in still]
        how = ("" if all(p in chosen for p in still) else
               "; tools/install-test-deps.sh could not install it (it needs root or passwordless sudo, and apt)")
        component_unavailable(what, f"missing {', '.join(named)}{how}")


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


def processes_with_env(*lines: str) -> list[int]:
    """Pids of the processes whose environment holds every one of `lines` (e.g. SLURM_CONF=...), not this one."""
    wanted = {line.encode() for line in lines}
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if wanted <= set(environ.read_bytes().split(b"\0")):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


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
    """An sshd of this user on the loopback hosts (require_sshd first says whether it can start)."""
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "login_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    shutil.copy(folder / "login_key.pub", folder / "authorized_keys")
    port = free_port(LOOPBACK_HOSTS[0], LOOPBACK_HOSTS[1:])
    listen = "".join(f"ListenAddress {host}:{port}\n" for host in LOOPBACK_HOSTS)
    (folder / "sshd_config").write_text(
        f"{listen}HostKey {folder / 'host_key'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        f"PidFile {folder / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nLogLevel VERBOSE\nMaxStartups 100\nMaxSessions 100\n" + hide_gpus_line())
    host_key = " ".join((folder / "host_key.pub").read_text().split()[:2])
    (folder / "known_hosts").write_text("".join(f"[{host}]:{port} {host_key}\n" for host in LOOPBACK_HOSTS))
    config = folder / "ssh_config"
    config.write_text(
        f"Host {' '.join(LOOPBACK_HOSTS)}\n  Port {port}\n  IdentityFile {folder / 'login_key'}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        "  LogLevel ERROR\n")
    log = folder / "sshd.log"
    popen = subprocess.Popen([daemon("sshd"), "-D", "-f", str(folder / "sshd_config"), "-E", str(log)],
                             start_new_session=True, stdin=subprocess.DEVNULL)
    sshd = Sshd(folder, port, config, log, popen)
    try:
        wait_for(lambda: all(_ssh_ok(config, host) for host in LOOPBACK_HOSTS), 30, "sshd on the loopback hosts")
    except RuntimeError:
        stop_group(popen)
        raise
    return sshd


def hide_gpus_line() -> str:
    """The processes the tests start over ssh see no GPU, as the local ones do (conftest): sshd sets
    CUDA_VISIBLE_DEVICES= in every session, unless SUITE_TEST_ON_GPUS=1 keeps the GPUs. SLURM's steps
    and batch jobs take the submitting process's environment (--export=ALL), so they see none already."""
    return "" if os.environ.get("SUITE_TEST_ON_GPUS") == "1" else "SetEnv CUDA_VISIBLE_DEVICES=\n"


def _ssh_ok(config: Path, host: str) -> bool:
    done = subprocess.run(["ssh", "-F", str(config), host, "true"], capture_output=True, timeout=30,
                          stdin=subprocess.DEVNULL, check=False)
    return done.returncode == 0


def require_sshd() -> None:
    """The loopback_sshd fixture's setup: installs what is missing, or skips (fails under CI=true)."""
    what = "sshd (openssh-server, openssh-client)"
    ensure_installed((daemon("sshd"), "ssh", "ssh-keygen"), what)
    if not Path("/run/sshd").is_dir():  # sshd's privilege separation folder (Debian creates it at boot)
        prefix = root_prefix()
        if prefix is None or subprocess.run([*prefix, "mkdir", "-p", "/run/sshd"], check=False).returncode:
            component_unavailable(what, "/run/sshd, sshd's privilege separation folder, is missing and this user "
                                  "cannot create it (not root, no passwordless sudo)")


@pytest.fixture(scope="session")
def loopback_sshd(tmp_path_factory):
    """An sshd for this user on 127.0.0.2 and 127.0.0.3; SUITE_SSH_OPTIONS points ssh at it."""
    require_sshd()
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
    node: str  # the (first) compute node
    daemons: list[subprocess.Popen]
    net: "NodeNet | None" = None  # the nodes' namespaces, for a cluster of several nodes

    @property
    def nodes(self) -> list[str]:
        return list(self.net.nodes) if self.net else [self.node]

    def env_line(self) -> str:
        return f"SLURM_CONF={self.conf}"


def slurm_conf(folder: Path, node: str, net: "NodeNet | None" = None) -> str:
    """One node (this machine, `node`) on 127.0.0.1, or the nodes of `net` (their own addresses; the
    controller, named `node`, on the bridge's address)."""
    nodes, ctld_addr = (net.nodes, net.bridge_address) if net else ({node: "127.0.0.1"}, "127.0.0.1")
    each = "-%n" if net else ""  # slurmd's files, one per node
    ctld_port, slurmd_port = free_port(), free_port()
    while slurmd_port == ctld_port:
        slurmd_port = free_port()
    settings = {
        "ClusterName": "hpcdltest", "SlurmctldHost": f"{node}({ctld_addr})", "SlurmctldPort": ctld_port,
        "SlurmdPort": slurmd_port, "AuthType": "auth/munge", "CredType": "cred/munge",
        "AuthInfo": f"socket={folder / 'munge.socket'}", "SlurmUser": "root", "SlurmdUser": "root",
        "StateSaveLocation": folder / "state", "SlurmdSpoolDir": folder / f"spool{each}",
        # each node's own temporary folder: srun --mpi=pmix makes its step's PMIx folder there
        "TmpFS": folder / f"tmp{each}",
        "SlurmctldPidFile": folder / "slurmctld.pid", "SlurmdPidFile": folder / f"slurmd{each}.pid",
        "SlurmctldLogFile": folder / "slurmctld.log", "SlurmdLogFile": folder / f"slurmd{each}.log",
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_CPU", "SchedulerType": "sched/backfill", "MpiDefault": "none",
        "JobAcctGatherType": "jobacct_gather/none", "AccountingStorageType": "accounting_storage/none",
        "ReturnToService": 2, "MinJobAge": 600, "KillWait": 5, "SchedulerParameters": "sched_interval=2",
        "SlurmdParameters": "config_overrides",  # at least 2 CPUs even on a smaller machine (tests use 2 tasks)
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += [f"NodeName={name} NodeAddr={addr} CPUs={max(2, os.cpu_count() or 1)} State=UNKNOWN"
              for name, addr in nodes.items()]
    lines += ["PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]
    return "\n".join(lines) + "\n"


def start_slurm(folder: Path, net: "NodeNet | None" = None) -> Slurm:
    """munged and slurmctld here, a slurmd for this machine or one in each node namespace of `net`."""
    node = socket.gethostname()
    per_node = [f"{kind}-{n}" for n in net.nodes for kind in ("spool", "tmp")] if net else ["spool", "tmp"]
    for sub in ("state", *per_node):
        (folder / sub).mkdir(parents=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, node, net))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = open(folder / "daemons.out", "w")
    started: list[subprocess.Popen] = []

    def start(*argv):
        started.append(subprocess.Popen(list(argv), env=env, stdout=logs, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True))

    slurm = Slurm(folder, conf, next(iter(net.nodes)) if net else node, started, net)
    try:
        start(daemon("munged"), "--foreground", "--force", f"--socket={folder / 'munge.socket'}",
              f"--key-file={key}", f"--pid-file={folder / 'munged.pid'}", f"--seed-file={folder / 'munged.seed'}",
              f"--log-file={folder / 'munged.log'}")
        wait_for(lambda: (folder / "munge.socket").exists(), 30, "munged's socket")
        start(daemon("slurmctld"), "-D", "-f", str(conf))
        for name in slurm.nodes:
            start(*(net.exec_argv(name) if net else ()), daemon("slurmd"), "-D", "-f", str(conf), "-N", name)
        wait_for(lambda: all(_node_idle(env, n) for n in slurm.nodes), 90,
                 f"SLURM node(s) {', '.join(slurm.nodes)} idle (logs in {folder})")
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
    if slurm.net:
        slurm.net.remove()


def require_slurm() -> None:
    """The slurm_cluster fixture's setup: installs what is missing, or skips (fails under CI=true)."""
    what = "SLURM and munge (slurmctld, slurmd, slurm-client, munge)"
    if os.getuid() != 0:
        # Passwordless sudo is not enough: the fixture signals the root daemons and their job steps
        # (slurmstepd) and reads their environment to leave nothing behind.
        component_unavailable(what, "the test cluster runs munged, slurmctld and slurmd as root (SlurmdUser=root) "
                              "and ends them and their job steps itself: run the tests as root")
    ensure_installed((daemon("munged"), daemon("slurmctld"), daemon("slurmd"), *SLURM_COMMANDS), what)


def serving(slurm):
    """Yields the running cluster with SLURM_CONF pointing at it; then stops it and checks that no
    daemon or job process is left."""
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


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (this machine, all its CPUs); SLURM_CONF points the commands at it."""
    require_slurm()
    slurm = start_slurm(tmp_path_factory.mktemp("slurm"))
    yield from serving(slurm)


# --- a SLURM cluster of two nodes: network namespaces of this machine ----------------------------

NODE_NAMES = ("hpcdl-n1", "hpcdl-n2")
NODE_NET_NEEDS = "network namespaces for two SLURM nodes (root, iproute2's ip, util-linux's nsenter and unshare)"


@dataclass
class NodeNet:
    """Compute nodes played by network namespaces of this machine: each has a veth to a bridge in the
    root namespace, an address in a private /24 picked here (no route leads anywhere else), and its
    daemon runs under its own host name with an /etc/hosts naming every node (mount and UTS
    namespaces: what a cluster's DNS answers). The filesystem is shared, as on a cluster. `made`
    lists what was created, in order."""

    token: str
    subnet: str  # the first three numbers, e.g. 10.213.57
    hosts_file: Path
    nodes: dict[str, str]  # node name -> address
    made: list[tuple[str, str]]

    @property
    def bridge(self) -> str:
        return f"hpcdl{self.token}br"

    @property
    def bridge_address(self) -> str:
        return f"{self.subnet}.1"

    def namespace(self, node: str) -> str:
        return f"hpcdl-{self.token}-{node}"

    def exec_argv(self, node: str) -> list[str]:
        """Runs a command on `node`: in its network namespace, under its host name, with its /etc/hosts."""
        return ["nsenter", f"--net=/run/netns/{self.namespace(node)}", "unshare", "--mount", "--uts", "sh", "-c",
                'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"', node, str(self.hosts_file)]

    def remove(self) -> None:
        """Undoes everything `made` lists, last first; what is already gone is skipped."""
        for kind, name in reversed(self.made):
            if kind == "netns":
                for pid in _ip("netns", "pids", name, check=False).split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                _ip("netns", "delete", name, check=False)
            else:
                _ip("link", "delete", name, check=False)
        self.made.clear()

    def leftovers(self) -> list[str]:
        names = [self.bridge, *(self.namespace(n) for n in self.nodes)]
        shown = _ip("-o", "link", check=False) + _ip("netns", "list", check=False)
        return [n for n in names if n in shown]


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def free_subnet() -> str:
    """A 10.213.X.0/24 that no address or route of this machine is in."""
    used = _ip("-4", "-o", "addr") + _ip("-4", "route")
    for third in random.sample(range(256), 256):
        if f"10.213.{third}." not in used:
            return f"10.213.{third}"
    raise RuntimeError("every 10.213.X.0/24 is in use here")


def make_node_net(folder: Path, names: tuple[str, ...] = NODE_NAMES) -> NodeNet:
    net = NodeNet(secrets.token_hex(2), free_subnet(), folder / "hosts", {}, [])
    try:
        net.made.append(("link", net.bridge))
        _ip("link", "add", net.bridge, "type", "bridge")
        _ip("addr", "add", f"{net.bridge_address}/24", "dev", net.bridge)
        _ip("link", "set", net.bridge, "up")
        net.nodes = {name: f"{net.subnet}.{11 + i}" for i, name in enumerate(names)}
        named = "".join(f"{address} {name}\n" for name, address in net.nodes.items())
        net.hosts_file.write_text(f"127.0.0.1 localhost\n{named}")
        for i, (name, address) in enumerate(net.nodes.items()):
            add_node(net, i + 1, name, address)
    except BaseException:
        net.remove()
        raise
    return net


def add_node(net: NodeNet, index: int, name: str, address: str) -> None:
    namespace, veth, inside = net.namespace(name), f"hpcdl{net.token}v{index}", f"hpcdl{net.token}p{index}"
    net.made.append(("netns", namespace))
    _ip("netns", "add", namespace)
    net.made.append(("link", veth))
    _ip("link", "add", veth, "type", "veth", "peer", "name", inside)
    _ip("link", "set", inside, "netns", namespace)
    _ip("link", "set", veth, "master", net.bridge)
    _ip("link", "set", veth, "up")
    for args in (("addr", "add", f"{address}/24", "dev", inside), ("link", "set", inside, "up"),
                 ("link", "set", "lo", "up")):
        _ip("-n", namespace, *args)


def require_node_net(folder: Path) -> NodeNet:
    """The namespaces of slurm_two_nodes, or a skip saying why (a failure under CI=true)."""
    if os.getuid() != 0:
        component_unavailable(NODE_NET_NEEDS, "creating network namespaces and links needs root")
    ensure_installed(("ip", "nsenter", "unshare"), NODE_NET_NEEDS)
    try:
        return make_node_net(folder)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        component_unavailable(NODE_NET_NEEDS, f"this machine cannot make them: {exc}")


@pytest.fixture(scope="module")  # its bridge and namespaces go before other modules' tests run
def slurm_two_nodes(tmp_path_factory):
    """A SLURM cluster of two compute nodes with their own addresses and host names (NODE_NAMES, in
    network namespaces, a slurmd each); slurmctld and munged here; SLURM_CONF points the commands at
    it. Everything it made is gone afterwards: daemons, job processes, namespaces, links, files."""
    require_slurm()
    folder = tmp_path_factory.mktemp("slurm2")
    net = require_node_net(folder)
    try:
        slurm = start_slurm(folder, net)
    except BaseException:
        net.remove()
        raise
    # The two nodes share this machine's cores: their jobs' threads wait passively (OMP_WAIT_POLICY, tests/conftest.py)
    yield from serving(slurm)
    assert net.leftovers() == []


def main(argv: list[str]) -> int:
    """`python tests/support/cluster_fixtures.py sshd|slurm|slurm2`: the same services for trying things by
    hand, until Ctrl-C (e.g. `make run CLUSTER=loopback-ssh` without a system sshd; slurm2: two nodes)."""
    import tempfile

    if argv not in (["sshd"], ["slurm"], ["slurm2"]):
        print("usage: python tests/support/cluster_fixtures.py sshd|slurm|slurm2", file=sys.stderr)
        return 2
    try:
        require_sshd() if argv[0] == "sshd" else require_slurm()
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        print(exc.msg, file=sys.stderr)
        return 1
    folder = Path(tempfile.mkdtemp(prefix=f"hpcdl-{argv[0]}-"))
    if argv[0] == "sshd":
        service = start_sshd(folder)
        print(f"sshd on {', '.join(LOOPBACK_HOSTS)} port {service.port}; in another shell:\n"
              f"  export SUITE_SSH_OPTIONS='{service.options}'", flush=True)
    else:
        service = start_slurm(folder, require_node_net(folder) if argv[0] == "slurm2" else None)
        print(f"SLURM node(s) {', '.join(service.nodes)} up; in another shell:\n"
              f"  export SLURM_CONF={service.conf}", flush=True)
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
