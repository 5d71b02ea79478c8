"""The record's provenance of the suite itself, on machines with and without git."""

import subprocess

from suite.base import paths
from suite.records import provenance


def test_a_checkout_gives_its_commit():
    head = subprocess.run(["git", "-C", str(paths.ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert provenance.git_state()["git_commit"] == (head.stdout.strip() or None)


def test_without_git_on_path_the_record_says_nothing_of_git(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a compute node's image without git
    assert provenance.git_state() == {"git_commit": None, "git_dirty": None, "git_diff_sha256": None}
    assert provenance.suite_provenance(["run"])["argv"] == ["run"]


def test_a_tree_that_is_no_checkout_says_nothing_of_git(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    assert provenance.git_state()["git_commit"] is None
