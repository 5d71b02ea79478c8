import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import known_clusters, load_cluster


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
