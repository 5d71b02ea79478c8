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
