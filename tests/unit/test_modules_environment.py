"""What loading a site's environment (runtime modules) sets: the probe reports the variables that steer frameworks
as the loading leaves them, the record keeps those it set or changed, and the interfaces they name are checked
on every host before launch, since every process loads after its environment is set, so the loading's value wins.
Here the loading is a sourced script (no module system needed); tests/integration/test_modules.py does the same
with Lmod's modulefiles."""

import os
import socket
import subprocess
import sys

from conftest import ROOT

from suite.execution.plugins import output_here
from suite.runtimes import modules


def sourced(tmp_path, *lines: str) -> modules.Setup:
    script = tmp_path / "site-env.sh"
    script.write_text("".join(f"{line}\n" for line in lines))
    return modules.Setup(source=(str(script),), python=sys.executable)


def test_the_probe_reports_what_the_loading_sets_or_changes_and_masks_credentials(tmp_path):
    setup = sourced(tmp_path, "export NCCL_SOCKET_IFNAME=ib", "export NCCL_DEBUG=WARN", "export OMP_NUM_THREADS=3",
                    "export SUITE_SITE_TOKEN=s3cret", "export NOT_A_FRAMEWORKS_VARIABLE=1")
    runner = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SUITE_SITE_"))}
    found = modules.read_probe(output_here(modules.probe_argv(setup, facts=False)), setup, "here")
    assert found["env"]["NCCL_SOCKET_IFNAME"] == "ib" and found["env"]["NOT_A_FRAMEWORKS_VARIABLE"] == "1"
    assert "NOT_A_FRAMEWORKS_VARIABLE" not in modules.set_by_loading(found, {})  # the env policy applies
    # the runner already has OMP_NUM_THREADS=3 and NCCL_DEBUG=WARN: not set by the loading
    assert modules.set_by_loading(found, {**runner, "OMP_NUM_THREADS": "3", "NCCL_DEBUG": "WARN"}) == {
        "NCCL_SOCKET_IFNAME": "ib", "SUITE_SITE_TOKEN": "***"}
    # a value the loading changes counts, as does one the runner lacks
    assert modules.set_by_loading(found, {**runner, "OMP_NUM_THREADS": "8"}) == {
        "NCCL_SOCKET_IFNAME": "ib", "NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "3", "SUITE_SITE_TOKEN": "***"}
    assert modules.sets_text(found).startswith("; the loading sets NCCL_DEBUG, NCCL_SOCKET_IFNAME")
    assert modules.fingerprint(found) == modules.fingerprint({**found, "env": {}})  # not part of the fingerprint


def test_an_interface_the_loading_names_and_no_host_has_is_refused_before_launch(tmp_path):
    """The run's own value names an interface this machine has; the loading's, which wins, names none."""
    here = sorted(name for _, name in socket.if_nameindex())
    setup = sourced(tmp_path, "export NCCL_SOCKET_IFNAME==hpcdl-absent0")
    argv = [sys.executable, "-m", "suite", "run", "--case", "pytorch-ddp", "--tiny", "--runtime", "modules",
            "--python", setup.python, "--source", setup.source[0], "--results-dir", str(tmp_path / "results"),
            "--runs-dir", str(tmp_path / "runs")]
    environ = {**os.environ, "NCCL_SOCKET_IFNAME": here[0]}
    refused = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=environ)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "; the loading sets NCCL_SOCKET_IFNAME" in refused.stdout
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: NCCL_SOCKET_IFNAME==hpcdl-absent0 (set by loading the stack on localhost, runtime modules): host "
        f"localhost has no interface it matches (its interfaces: {', '.join(here)}), so its processes would find "
        "no socket to use: name one of these, or leave it unset")
    assert not (tmp_path / "results").exists() and not list((tmp_path / "runs").glob("*/rep-*"))
