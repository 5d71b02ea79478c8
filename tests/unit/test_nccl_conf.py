"""NCCL's configuration files ($NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf): what each rank's host facts
read of them, the summary's line and a rerun's note where they changed. NCCL takes their settings where the
environment sets none, so a site's /etc/nccl.conf moves NCCL's figures without showing in the environment."""

from types import SimpleNamespace

from suite.execution.console import nccl_conf_line, nccl_files_text
from suite.execution.rerun import nccl_conf_drift
from suite.instack import probe
from suite.instack.probe import nccl_conf


def test_the_files_are_read_in_nccls_order_and_their_lines_as_nccl_reads_them(tmp_path):
    home, system = tmp_path / "home", tmp_path / "etc-nccl.conf"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_DEBUG=INFO\n")
    system.write_text("# the site's\nNCCL_SOCKET_IFNAME==ib0\nnot a setting\n=no name\nNCCL_IB_HCA=mlx5_0:1,mlx5_1:1\n")
    assert nccl_conf({}, str(home), str(system)) == {
        str(home / ".nccl.conf"): {"NCCL_DEBUG": "INFO"},
        str(system): {"NCCL_SOCKET_IFNAME": "=ib0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1"}}
    own = tmp_path / "mine.conf"  # NCCL_CONF_FILE takes the place of ~/.nccl.conf
    own.write_text("NCCL_ALGO=Ring\n")
    assert list(nccl_conf({"NCCL_CONF_FILE": str(own)}, str(home), str(system))) == [str(own), str(system)]
    assert nccl_conf({}, str(tmp_path / "nobody"), str(tmp_path / "absent")) == {}


def test_each_hosts_facts_carry_the_files_where_the_rank_runs(tmp_path, monkeypatch):
    own = tmp_path / "nccl.conf"
    own.write_text("NCCL_NET=IB\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(own))
    assert probe.host_info()["nccl_conf"][str(own)] == {"NCCL_NET": "IB"}


def test_the_summary_says_each_files_settings_once_with_the_hosts_that_have_them():
    site = {"/etc/nccl.conf": {"NCCL_SOCKET_IFNAME": "ib", "NCCL_IB_HCA": "mlx5"}}
    record = {"provenance": {"host_info": {"n1": {"nccl_conf": site}, "n2": {"nccl_conf": site},
                                           "n3": {"nccl_conf": {"/etc/nccl.conf": {"NCCL_IB_HCA": "mlx5_1"}}}}}}
    assert nccl_conf_line(record) == (
        "NCCL's files: /etc/nccl.conf sets NCCL_SOCKET_IFNAME=ib, NCCL_IB_HCA=mlx5 (on n1, n2); /etc/nccl.conf sets "
        "NCCL_IB_HCA=mlx5_1 (on n3); NCCL takes each setting that the environment leaves unset")
    assert nccl_conf_line({"provenance": {"host_info": {"n1": {"nccl_conf": {}}, "old": {}}}}) is None


def test_a_rerun_here_notes_files_that_changed_since_the_record(tmp_path, monkeypatch):
    own = tmp_path / "nccl.conf"
    own.write_text("NCCL_ALGO=Tree\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(own))
    here = SimpleNamespace(scheduler=SimpleNamespace(name="local"))
    now = nccl_conf()
    assert nccl_conf_drift({"provenance": {"host_info": {"h": {"nccl_conf": now}}}}, here) == []
    assert nccl_conf_drift({"provenance": {"host_info": {"h": {}}}}, here) == []  # an older record says nothing
    assert nccl_conf_drift({"provenance": {"host_info": {"h": {"nccl_conf": {}}}}}, here) == [
        f"NCCL's files: none in the record, {nccl_files_text(now)} here"]
    assert nccl_files_text(now).startswith(f"{own} sets NCCL_ALGO=Tree")  # the rest: this machine's /etc/nccl.conf
    elsewhere = SimpleNamespace(scheduler=SimpleNamespace(name="slurm"))  # the nodes show theirs in the new record
    assert nccl_conf_drift({"provenance": {"host_info": {"h": {"nccl_conf": {}}}}}, elsewhere) == []


def test_doctor_names_this_machines_files(tmp_path, monkeypatch, capsys):
    from suite.execution.doctor import doctor

    own = tmp_path / "nccl.conf"
    own.write_text("NCCL_SOCKET_IFNAME=ib\nNCCL_IB_HCA=mlx5_0\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(own))
    doctor(None, ["pytorch-ddp"])
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("NCCL's files on this machine")]
    assert line.startswith(f"NCCL's files on this machine: {own} sets NCCL_SOCKET_IFNAME=ib, NCCL_IB_HCA=mlx5_0")
