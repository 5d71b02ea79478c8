import dataclasses
from pathlib import Path

import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster, known_clusters, load_cluster


@pytest.mark.parametrize("name", known_clusters())
def test_shipped_profiles_load(name):
    cluster = load_cluster(name)
    assert cluster.scheduler in {"local", "ssh", "slurm"}
    if cluster.hostfile:
        assert cluster.hostfile.exists()
    if cluster.interconnect:
        assert cluster.interconnect["bandwidth_gbit_s"] > 0


def test_example_profiles_are_marked():
    for name in ("cte-power", "juwels-booster"):
        assert load_cluster(name).example and load_cluster(name).devices_per_node == 4


def test_unknown_key_and_unknown_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "typo.toml").write_text('scheduler = "local"\ndevices_per_nod = 4\n')
    (tmp_path / "typo2.toml").write_text('[slurm]\npartiton = "gpu"\n')
    (tmp_path / "broken.toml").write_text('scheduler = \n')
    with pytest.raises(UsageError, match=r"typo.toml: unknown key 'devices_per_nod' \(allowed: "):
        load_cluster("typo")
    with pytest.raises(UsageError, match=r"unknown key \[slurm\] 'partiton'"):
        load_cluster("typo2")
    with pytest.raises(UsageError, match="broken.toml: "):
        load_cluster("broken")
    with pytest.raises(UsageError, match=r"unknown cluster 'nope' \(profiles in hostfiles/: broken, typo, typo2\)"):
        load_cluster("nope")


def test_every_table_key_a_plugin_declares_is_in_the_profile_docs():
    """docs/clusters.md's table of plugin settings: each [table] and key a scheduler or runtime reads."""
    import re

    from suite.execution.clusters import plugin_settings

    documented: dict[str, set[str]] = {}
    table = None
    for line in (paths.ROOT / "docs" / "clusters.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        if len(cells) == 3 and (named := re.fullmatch(r"`\[(\w+)\]`", cells[0])):
            table = named.group(1)
        if len(cells) == 3 and table and (cells[0] == "" or cells[0].startswith("`[")):
            documented.setdefault(table, set()).update(re.findall(r"`(\w+)`", cells[1]))
    for name, settings in plugin_settings().items():
        missing = set(settings) - documented.get(name, set())
        assert not missing, f"docs/clusters.md lacks [{name}] {', '.join(sorted(missing))}"


def test_every_shipped_profile_is_named_in_the_docs():
    text = (paths.ROOT / "docs" / "clusters.md").read_text()
    assert not [name for name in known_clusters() if f"`{name}`" not in text]


# --- [env]: variables a cluster profile sets in every process of a run ------------------------------

ENV_PROFILE = '''scheduler = "local"
hostfile = "two-hosts"
[env]
FI_PROVIDER = "cxi"
NCCL_NET_GDR_LEVEL = "PHB"
NCCL_IB_TIMEOUT = 22
'''


def profile_elsewhere(tmp_path, text: str = ENV_PROFILE):
    """A profile file outside hostfiles/ (as a site keeps its own), its relative hostfile beside it."""
    (tmp_path / "two-hosts").write_text("node1 slots=2\nnode2 slots=2\n")
    (tmp_path / "site.toml").write_text(text)
    return tmp_path / "site.toml"


def test_a_profile_given_by_its_path_reads_its_hostfile_beside_it_and_its_env_as_strings(tmp_path):
    cluster = load_cluster(str(profile_elsewhere(tmp_path)))
    assert cluster.name == "site" and cluster.hostfile == tmp_path / "two-hosts"
    assert cluster.env == {"FI_PROVIDER": "cxi", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_IB_TIMEOUT": "22"}
    with pytest.raises(UsageError, match=r"^no cluster profile file .*/nope\.toml$"):
        load_cluster(str(tmp_path / "nope.toml"))


def test_what_the_run_is_given_wins_over_the_profiles_env(tmp_path):
    from suite.execution.clusters import applied_env

    cluster = load_cluster(str(profile_elsewhere(tmp_path)))
    applied = applied_env(cluster, {"NCCL_IB_TIMEOUT": "18", "HOME": "/root"})
    assert applied == {"FI_PROVIDER": "cxi", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_IB_TIMEOUT": "18"}
    assert applied_env(None, {"FI_PROVIDER": "tcp"}) == {}


@pytest.mark.parametrize("line, message", [
    ('"1X" = "a"', r"\[env\] 1X: not a variable name"),
    ('SUITE_RUN_DIR = "/x"', r"\[env\] SUITE_RUN_DIR: the runner sets it for the run and its stack"),
    ('PATH = "/opt/bin"', r"\[env\] PATH: the runner sets it"),
    ('HF_TOKEN = "hf_abc"', r"\[env\] HF_TOKEN: looks like a credential"),
    ("NCCL_DEBUG = true", r"\[env\] NCCL_DEBUG must be a string or a number, got True"),
    ("NCCL_DEBUG = [1]", r"\[env\] NCCL_DEBUG must be a string or a number, got \[1\]"),
])
def test_bad_env_entries_are_refused_naming_the_variable(tmp_path, line, message):
    path = profile_elsewhere(tmp_path, f"[env]\n{line}\n")
    with pytest.raises(UsageError, match=rf"^cluster profile {path}: {message}"):
        load_cluster(str(path))
    (tmp_path / "flat.toml").write_text('env = "NCCL_DEBUG=INFO"\n')
    with pytest.raises(UsageError, match=r"env must be a table"):
        load_cluster(str(tmp_path / "flat.toml"))


def test_the_profiles_env_reaches_each_process_under_the_stacks_and_the_launchers_own():
    from suite.base.env_policy import SITE_NAMES, forwarded_env
    from suite.execution.plan import Launch, StackEnv
    from suite.inputs.hostfiles import Host, World
    from suite.instack.probe import site_env_seen

    stack = StackEnv("local", "/stack/bin", env={"NCCL_NET_GDR_LEVEL": "SYS"})
    site = {"RDMAV_FORK_SAFE": "1", "NCCL_NET_GDR_LEVEL": "PHB", "RANK": "9"}
    launch = Launch("train.py", [], World((Host("node1", 2),), "hf"), stack, "/run", "/data", site_env=site)
    env = launch.env(Host("node1", 2), RANK="0")
    assert (env["RDMAV_FORK_SAFE"], env["NCCL_NET_GDR_LEVEL"], env["RANK"]) == ("1", "SYS", "0")
    assert env[SITE_NAMES] == "NCCL_NET_GDR_LEVEL,RANK,RDMAV_FORK_SAFE"
    # RDMAV_ (libibverbs) is no name the policy forwards by itself: the profile's list carries it along
    assert forwarded_env({**env, "HOME": "/root"}, remote=True)["RDMAV_FORK_SAFE"] == "1"
    assert "RDMAV_FORK_SAFE" not in forwarded_env({"RDMAV_FORK_SAFE": "1"})
    assert site_env_seen({**env, "RDMAV_FORK_SAFE": "0"}) == {"RDMAV_FORK_SAFE": "0", "NCCL_NET_GDR_LEVEL": "SYS",
                                                                "RANK": "0"}
    assert site_env_seen({"RDMAV_FORK_SAFE": "0"}) == {}
    assert SITE_NAMES == "SUITE_SITE_ENV"  # the name suite/instack/probe.py reads (it may not import the policy)


def test_podman_is_told_the_profiles_names():
    """Podman passes only the variables it is named (`--env=NAME`): the policy's and the profile's."""
    from suite.runtimes import podman

    names = podman.profile_names(Cluster("c", Path("c.toml"), env={"RDMAV_FORK_SAFE": "x"}))
    prefix = podman.run_prefix("podman", {"command": "podman", "mpi": False, "options": []}, "img", [], "/runs",
                               False, "s1", names)
    assert "--env=RDMAV_FORK_SAFE" in prefix and prefix.index("--env=RDMAV_FORK_SAFE") < prefix.index("img")
    assert podman.profile_names(None) == []


def test_docker_passes_the_profiles_names_its_client_process_was_given():
    from suite.runtimes.docker import container_env

    given = {"SUITE_SITE_ENV": "RDMAV_FORK_SAFE", "RDMAV_FORK_SAFE": "1", "RDMAV_OTHER": "x", "HOME": "/root"}
    assert container_env(given) == {"SUITE_SITE_ENV": "RDMAV_FORK_SAFE", "RDMAV_FORK_SAFE": "1", "HOME": "/tmp"}


def test_the_record_names_each_rank_that_did_not_see_the_profiles_env():
    from suite.records.write import env_not_seen

    planned = {"FI_PROVIDER": "cxi", "NCCL_IB_TIMEOUT": "22"}
    starts = [{"rank": 0, "host": "n1", "site_env": dict(planned)},
              {"rank": 1, "host": "n2", "site_env": {"FI_PROVIDER": None, "NCCL_IB_TIMEOUT": "22"}}]
    assert env_not_seen(planned, starts) == ["rank 1 on n2: FI_PROVIDER=(unset), set to 'cxi'"]
    assert env_not_seen({}, starts) == []


def test_doctor_shows_the_profiles_env(tmp_path, capsys):
    from suite.execution.doctor import doctor

    doctor(str(profile_elsewhere(tmp_path)), ["pytorch-gpt"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cluster site: scheduler local")
    assert lines[1] == ("environment of every process (the profile's [env]): FI_PROVIDER=cxi NCCL_IB_TIMEOUT=22 "
                        "NCCL_NET_GDR_LEVEL=PHB")


def test_a_profiles_path_is_kept_whole_in_the_request_a_batch_job_reruns(tmp_path, monkeypatch):
    from suite.execution.request import from_argv, to_argv

    monkeypatch.chdir(tmp_path)
    req = from_argv(["run", "--cluster", "site.toml"])
    argv = to_argv(req)
    assert req.cluster == str(tmp_path / "site.toml") and argv[argv.index("--cluster") + 1] == req.cluster
    assert from_argv(["run", "--cluster", "loopback-ssh"]).cluster == "loopback-ssh"


def test_rerun_says_where_the_profiles_env_now_differs_from_the_records():
    from types import SimpleNamespace

    from suite.execution.rerun import site_env_drift

    now = SimpleNamespace(site_env={"FI_PROVIDER": "cxi", "NCCL_CROSS_NIC": "1"})
    assert site_env_drift({"cluster_env": {"FI_PROVIDER": "cxi", "NCCL_CROSS_NIC": "1"}}, now) == []
    assert site_env_drift({}, now) == []  # older records do not say
    assert site_env_drift({"cluster_env": {"FI_PROVIDER": "tcp"}}, now) == [
        "the cluster profile's [env] differs: FI_PROVIDER=tcp in the record, cxi now; "
        "NCCL_CROSS_NIC=(unset) in the record, 1 now"]


@pytest.mark.parametrize("text, message", [
    ('devices_per_node = "4"', "devices_per_node must be an integer, got '4'"),
    ("devices_per_node = 0", "devices_per_node must be above 0, got 0"),
    ("hostfile = 3", "hostfile must be a string, got 3"),
    ('wheels = ["/w"]', r"wheels must be a string, got \['/w'\]"),
    ('example = "yes"', r"example must be a boolean \(true or false\), got 'yes'"),
    ('[interconnect]\nbandwidth_gbit_s = "fast"', r"\[interconnect\] bandwidth_gbit_s must be a number, got 'fast'"),
    ("[interconnect]\nlatency_us = -1", r"\[interconnect\] latency_us must be at least 0, got -1"),
    ('[slurm]\ncpus_per_task = "8"', r"\[slurm\] cpus_per_task must be an integer \(CPUs per task\), got '8'"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(tmp_path, text, message):
    """A profile's values, before any is used: a string for a count once ended in a TypeError's traceback."""
    (tmp_path / "p.toml").write_text(text + "\n")
    with pytest.raises(UsageError, match=rf"^cluster profile {tmp_path / 'p.toml'}: {message}$"):
        load_cluster(str(tmp_path / "p.toml"))


def test_the_interface_variables_a_run_sets_and_where_each_comes_from(tmp_path):
    from suite.execution.clusters import interface_settings

    cluster = load_cluster(str(profile_elsewhere(tmp_path, '[env]\nNCCL_SOCKET_IFNAME = "hsn"\n'
                                                          'DMLC_INTERFACE = "hsn0"\nGLOO_SOCKET_IFNAME = " "\n')))
    mine = f"[env] of cluster profile {tmp_path / 'site.toml'}"
    assert interface_settings(cluster, {"DMLC_INTERFACE": "eth0", "NCCL_DEBUG": "INFO"}) == {
        "NCCL_SOCKET_IFNAME": ("hsn", mine), "DMLC_INTERFACE": ("eth0", "the run's environment")}
    assert interface_settings(cluster, {"NCCL_SOCKET_IFNAME": "", "DMLC_INTERFACE": ""}) == {}  # empty: unset
    assert interface_settings(None, {"HOROVOD_GLOO_IFACE": "ib0"}) == {
        "HOROVOD_GLOO_IFACE": ("ib0", "the run's environment")}


def test_doctor_checks_the_interfaces_named_against_this_machine_where_the_hosts_are_this_machine(tmp_path, capsys,
                                                                                                  monkeypatch):
    import socket

    from suite.execution.doctor import interface_lines

    here = sorted(name for _, name in socket.if_nameindex())
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", here[0])
    monkeypatch.setenv("NCCL_IB_HCA", "=hpcdl-absent")
    ib = Path("/sys/class/infiniband")
    ib_here = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    cluster = load_cluster(str(profile_elsewhere(tmp_path, '[env]\nNCCL_SOCKET_IFNAME = "=hpcdl-absent"\n')))
    assert interface_lines(cluster) == [
        f"missing: NCCL_SOCKET_IFNAME==hpcdl-absent ([env] of cluster profile {tmp_path / 'site.toml'}): this machine "
        f"has no interface it matches (its interfaces: {', '.join(here)})",
        f"ok: GLOO_SOCKET_IFNAME={here[0]} (the run's environment): this machine has what it names",
        "missing: NCCL_IB_HCA==hpcdl-absent (the run's environment): this machine has no InfiniBand device "
        + (f"it matches (its InfiniBand devices: {', '.join(ib_here)})" if ib_here else "at all")]
    # the nodes are not this machine: the run checks each before launch
    assert interface_lines(dataclasses.replace(cluster, scheduler="slurm")) == []
    monkeypatch.setattr("suite.execution.plugins.output_here", lambda argv: None)  # the probe did not answer
    assert interface_lines(cluster)[1] == (f"not checked: GLOO_SOCKET_IFNAME={here[0]} (the run's environment): this "
                                           "machine's devices could not be listed")
