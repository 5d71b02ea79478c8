"""Runtime `modules` (suite/runtimes/modules.py) with real Lmod: a site's environment made of Lua
modulefiles written here, one for a site's Python, one that puts PyTorch on it the way EasyBuild's
modules do (PYTHONPATH to the already-built pytorch stack's packages), one for Horovod and one for
JAX, and a venv with --system-site-packages on top, activated by a sourced script, as JSC's
sc_venv_template makes it. Runs of pytorch-ddp, pytorch-synthetic and jax-gpt here, over the loopback
ssh hosts and as a batch job on the two-node SLURM cluster; refusals before launch; a rerun after a
modulefile changed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, component_unavailable, installed_stack, records_in, tiny, tiny_tf_cifar_in_memory
from support.cluster_fixtures import NODE_NAMES, ensure_installed

from suite import cli
from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster
from suite.execution.plan import StackRequest
from suite.launchers import horovod
from suite.records.schema import validate
from suite.runtimes import modules
from suite.stacks.recipes import load_stack

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
DDP = tiny("pytorch-ddp")
SYNTHETIC = tiny("pytorch-synthetic")


def site_packages(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def base_python(python: Path) -> str:
    """The interpreter a stack's venv was made from: what a site's Python module would provide."""
    code = "import os, sys; print(os.path.realpath(sys._base_executable))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def modulefile(folder: Path, name: str, *lines: str) -> Path:
    path = folder / f"{name}.lua"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Modulefiles (site-python/3.11, site-pytorch/2.13, site-horovod/0.28, site-jax/0.10, site-fabric) over the
    built stacks, and a venv on top of the site's Python; nothing is installed (the stacks are the suite's own)."""
    ensure_installed((LMOD_INIT,), "lmod (environment modules, Debian package lmod)")
    torch_stack, horovod_stack = installed_stack("pytorch"), installed_stack("pytorch-horovod")
    root = tmp_path_factory.mktemp("site")
    python = base_python(torch_stack.python)
    (root / "python" / "bin").mkdir(parents=True)
    (root / "python" / "bin" / "python3").symlink_to(python)
    mf = root / "modulefiles"
    modulefile(mf, "site-python/3.11", f'prepend_path("PATH", "{root / "python" / "bin"}")')
    modulefile(mf, "site-pytorch/2.13", 'depends_on("site-python/3.11")',
               f'prepend_path("PYTHONPATH", "{site_packages(torch_stack.python)}")')
    modulefile(mf, "site-horovod/0.28", 'depends_on("site-python/3.11")',
               f'prepend_path("PYTHONPATH", "{site_packages(horovod_stack.python)}")')
    modulefile(mf, "site-jax/0.10", 'depends_on("site-python/3.11")',
               f'prepend_path("PYTHONPATH", "{site_packages(installed_stack("jax").python)}")')
    # a fabric's module, as sites set NCCL's network for their nodes: one naming this machine's loopback, one an
    # interface no host here has
    modulefile(mf, "site-fabric/1", 'setenv("NCCL_SOCKET_IFNAME", "lo")', 'setenv("NCCL_DEBUG", "WARN")')
    modulefile(mf, "site-fabric/elsewhere", 'setenv("NCCL_SOCKET_IFNAME", "=hpcdl-absent0")')
    subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(root / "venv")], check=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODULEPATH", str(mf))  # what `module use` in this shell would have set
        patch.setenv("OMP_NUM_THREADS", "1")
        yield root


def run(*args: str, tmp: Path, case_args=(), prefix=(), timeout=900) -> subprocess.CompletedProcess:
    """`python -m suite run --runtime modules ARGS -- CASE_ARGS` with records and runs under tmp."""
    command = [*prefix, sys.executable, "-m", "suite", "run", "--runtime", "modules", "--results-dir",
               str(tmp / "results"), "--runs-dir", str(tmp / "runs"), *args, "--", *case_args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def the_record(done, tmp: Path) -> dict:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    [record] = records_in(tmp / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    return record


def refused(done, tmp: Path) -> str:
    """The one line of a refusal before launch: exit 2, no record, no repetition started."""
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (tmp / "results").exists() and not list((tmp / "runs").glob("*/rep-*"))
    [line] = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: ")
    return line


# --- settings: the profile's table and the run's options ----------------------------------------

def test_the_runs_options_replace_the_profiles_and_the_modulepath_comes_from_where_the_run_starts(monkeypatch):
    profile = Cluster("site", Path("site.toml"), plugins={"modules": {
        "load": ["GCC/13", "PyTorch/2.3"], "source": ["/p/venv/activate.sh"], "python": "/p/venv/bin/python",
        "purge": True}})
    monkeypatch.setenv("MODULEPATH", "/etc/mods:/opt/mods")
    stack = load_stack("pytorch")
    assert modules.setup_of(StackRequest(stack, profile=profile)) == modules.Setup(
        None, ("/etc/mods", "/opt/mods"), True, ("GCC/13", "PyTorch/2.3"), ("/p/venv/activate.sh",),
        "/p/venv/bin/python")
    asked = modules.setup_of(StackRequest(stack, profile=profile, modules=("PyTorch/2.4",), source=(),
                                          python="/x/python"))
    assert (asked.load, asked.source, asked.python) == (("PyTorch/2.4",), (), "/x/python")
    plain = modules.setup_of(StackRequest(stack, python="/venv/bin/python"))
    assert modules.steps(plain) == [] and modules.wrapper(plain) == ()  # an existing environment: run as it is


def test_other_runtimes_refuse_the_options_of_a_sites_environment(suite_cli):
    done = suite_cli("run", "--case", "pytorch-ddp", "--modules", "PyTorch/2.3", "--dry-run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--modules (Make: MODULES, SOURCE, PYTHON) choose the environment of RUNTIME=modules" in done.stderr


def test_horovod_without_pytorch_or_without_gloo_and_mpi_is_refused():
    horovod.check_build({})  # facts not read yet: nothing to say
    horovod.check_build({"horovod_torch": True, "horovod_gloo": False, "horovod_mpi": True})
    with pytest.raises(UsageError, match="neither Gloo nor MPI"):
        horovod.check_build({"horovod_torch": True, "horovod_gloo": False, "horovod_mpi": False})
    with pytest.raises(UsageError, match=r"cannot run PyTorch \(import horovod.torch: ImportError: x\)"):
        horovod.check_build({"horovod_torch": False, "horovod_error": "ImportError: x"})


# --- refusals before launch, in the loaded environment -------------------------------------------

def test_a_module_that_does_not_load_is_refused_with_lmods_own_error(site, tmp_path):
    line = refused(run("--case", "pytorch-ddp", "--modules", "site-pytorch/9.9", tmp=tmp_path, case_args=DDP), tmp_path)
    assert "module site-pytorch/9.9 does not load on localhost: Lmod has detected the following error" in line
    assert 'The following module(s) are unknown: "site-pytorch/9.9"' in line


@pytest.mark.parametrize("case, case_args, package", [
    ("pytorch-synthetic", SYNTHETIC, "horovod>=0.28.1"),
    ("tf-cifar", tiny_tf_cifar_in_memory(), "tf-keras>=2.15")])
def test_a_framework_missing_in_the_environment_is_refused_naming_it(site, tmp_path, case, case_args, package):
    line = refused(run("--case", case, "--modules", "site-pytorch/2.13", tmp=tmp_path, case_args=case_args), tmp_path)
    python = site / "python" / "bin" / "python3"
    assert line == (f"error: case {case} needs {package}; the stack (runtime modules, {python}) has no "
                    f"{package.split('>')[0]}")


def test_an_interface_a_module_names_and_the_host_lacks_is_refused(site, tmp_path, monkeypatch):
    """The module's setenv wins over the run's own NCCL_SOCKET_IFNAME (every process loads after its environment
    is set), so the module's value is the one checked."""
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    line = refused(run("--case", "pytorch-ddp", "--modules", "site-pytorch/2.13 site-fabric/elsewhere", tmp=tmp_path,
                       case_args=DDP), tmp_path)
    assert line.startswith("error: NCCL_SOCKET_IFNAME==hpcdl-absent0 (set by loading the stack on localhost, runtime "
                           "modules): host localhost has no interface it matches (its interfaces: ")


def test_a_python_that_is_not_there_is_refused(site, tmp_path):
    line = refused(run("--case", "pytorch-ddp", "--python", str(tmp_path / "nope" / "python"), tmp=tmp_path,
                       case_args=DDP), tmp_path)
    assert line == f"error: PYTHON {tmp_path / 'nope' / 'python'} is not an executable file on localhost"


def test_no_module_system_is_refused(site, tmp_path):
    """A machine without one: this one's Lmod hidden under an empty folder, in a mount namespace."""
    hide = [d for d in ("/usr/share/lmod", "/usr/share/modules") if Path(d).is_dir()]
    mounts = "; ".join(f"mount -t tmpfs none {d}" for d in hide)
    if subprocess.run(["unshare", "--mount", "sh", "-c", mounts], capture_output=True).returncode:
        component_unavailable("mount namespaces (unshare --mount)", "cannot make one here: it needs root")
    line = refused(run("--case", "pytorch-ddp", "--modules", "site-pytorch/2.13", tmp=tmp_path, case_args=DDP,
                       prefix=("unshare", "--mount", "sh", "-c", f'{mounts}; exec "$@"', "hide")), tmp_path)
    assert line.startswith("error: no module system found on localhost (no `module` command, none of $MODULESHOME")


def test_a_profiles_init_that_is_not_there_is_refused(site, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "site.toml").write_text(f'hostfile = "{ROOT / "hostfiles" / "localhost"}"\nruntime = "modules"\n'
                                        '[modules]\ninit = "/nowhere/lmod/init/bash"\nload = ["site-pytorch/2.13"]\n')
    code = cli.main(["run", "--cluster", "site", "--case", "pytorch-ddp", "--results-dir", str(tmp_path / "results"),
                     "--runs-dir", str(tmp_path / "runs"), "--", *DDP])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: no module system on localhost: cannot source /nowhere/lmod/init/bash ([modules] init)")


# --- what a profile's environment looks like before any run ------------------------------------

def test_doctor_and_a_dry_run_show_the_profiles_environment(site, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    (tmp_path / "site.toml").write_text(f'runtime = "modules"\nscheduler = "slurm"\n[modules]\n'
                                        f'modulepath = ["{site / "modulefiles"}"]\nload = ["site-pytorch/2.13"]\n')
    monkeypatch.delenv("MODULEPATH")  # the profile's modulepath alone
    assert cli.main(["doctor", "--cluster", "site", "--case", "pytorch-ddp"]) in (0, 1)
    [line] = [line for line in capsys.readouterr().out.splitlines() if ": runtime modules: " in line]
    assert line.startswith("ok: runtime modules: modules site-pytorch/2.13 load here; python 3.")
    assert f" at {site / 'python' / 'bin' / 'python3'} with torch 2." in line
    assert cli.main(["run", "--cluster", "site", "--case", "pytorch-ddp", "--dry-run", "--runs-dir",
                     str(tmp_path / "runs"), "--", *DDP]) == 0
    out = capsys.readouterr().out
    script = out[out.index("job.sbatch ---"):]
    assert script.index(f"module use {site / 'modulefiles'}") < script.index("module load site-pytorch/2.13") \
        < script.index("exec ") and "--runtime modules" in script
    assert "argv: bash -c " in out and "modules-env python3 -m torch.distributed.run" in out


def test_an_existing_environment_alone_runs_as_it_is(site, tmp_path):
    """PYTHON and no modules: no module system needed, nothing wraps the programs."""
    python = installed_stack("pytorch").python
    done = run("--case", "pytorch-ddp", "--python", str(python), "--dry-run", tmp=tmp_path, case_args=DDP)
    assert done.returncode == 0, done.stderr
    assert "runtime modules: no modules; python 3." in done.stdout and "environment sha256:" in done.stdout
    assert f"argv: {python} -m torch.distributed.run --nnodes 1" in done.stdout


# --- real runs ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ddp_here(site, tmp_path_factory):
    """pytorch-ddp in the site's PyTorch module (unversioned: the default version), here."""
    tmp = tmp_path_factory.mktemp("ddp-here")
    return the_record(run("--case", "pytorch-ddp", "--modules", "site-pytorch", tmp=tmp, case_args=DDP), tmp), tmp


def test_pytorch_ddp_runs_in_the_sites_modules_and_the_record_fingerprints_them(site, ddp_here):
    record, _ = ddp_here
    prov, mf = record["provenance"], site / "modulefiles"
    assert prov["runtime"] == record["execution"]["runtime"] == "modules" and prov["stack_flavour"] is None
    assert prov["modules_loaded"] == ["site-python/3.11", "site-pytorch/2.13"]
    assert sorted(prov["environment_files"]) == [str(mf / "site-python/3.11.lua"), str(mf / "site-pytorch/2.13.lua")]
    assert prov["stack_location"] == str(site / "python" / "bin" / "python3")
    torch = installed_stack("pytorch").info["packages"]["torch"]
    assert prov["stack_packages"]["torch"] == torch == prov["versions"]["torch"]  # as rank 0 imported it
    assert len(prov["environment_fingerprint"]) == 64 and prov["stack_lock_sha256"] == prov["environment_fingerprint"]
    [process] = record["repetitions"][0]["processes"]
    assert process["argv"][:2] == ["bash", "-c"] and "module load site-pytorch" in process["argv"][2]
    assert process["argv"][3:7] == ["modules-env", prov["stack_location"], "-m", "torch.distributed.run"]
    facts = json.loads(modules.facts_path(prov["environment_fingerprint"]).read_text())["facts"]
    assert facts["torch_version"] == torch


def test_pytorch_synthetic_runs_in_a_venv_on_top_of_the_modules(site, tmp_path):
    """sc_venv_template's way: modules, then a venv with the system site packages, activated."""
    activate = site / "venv" / "bin" / "activate"
    record = the_record(run("--case", "pytorch-synthetic", "--modules", "site-horovod/0.28 site-fabric/1", "--source",
                            str(activate), tmp=tmp_path, case_args=SYNTHETIC), tmp_path)
    prov = record["provenance"]
    assert prov["modules_loaded"] == ["site-python/3.11", "site-horovod/0.28", "site-fabric/1"]
    # what the loading set, the fabric module's interface among it (checked against this machine's: lo is there)
    assert {k: prov["environment_set_by_loading"].get(k) for k in ("NCCL_SOCKET_IFNAME", "NCCL_DEBUG")} == {
        "NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "WARN"}
    assert prov["stack_location"] == str(site / "venv" / "bin" / "python3")
    assert str(activate) in prov["environment_files"] and "horovod" in prov["stack_packages"]
    assert record["execution"]["controller"] == "gloo"
    facts = json.loads(modules.facts_path(prov["environment_fingerprint"]).read_text())["facts"]
    assert facts["horovod_torch"] and facts["horovod_gloo"]


def test_jax_gpt_runs_in_the_sites_jax_module(site, tmp_path):
    """A site's JAX (as JSC and CSCS provide it), two processes joined by jax.distributed in the module's Python."""
    record = the_record(run("--case", "jax-gpt", "--gpus-per-node", "2", "--modules", "site-jax/0.10", tmp=tmp_path,
                            case_args=(*tiny("jax-gpt"), "--parallel", "fsdp")), tmp_path)
    prov = record["provenance"]
    assert prov["modules_loaded"] == ["site-python/3.11", "site-jax/0.10"]
    assert prov["stack_location"] == str(site / "python" / "bin" / "python3")
    jax = installed_stack("jax").info["packages"]["jax"]
    assert prov["stack_packages"]["jax"] == jax == prov["versions"]["jax"]  # as the processes imported it
    assert record["config"]["reported_by_case"]["processes"] == 2 and record["metrics"]["throughput"]["mean"] > 0
    assert all("module load site-jax/0.10" in p["argv"][2] for p in record["repetitions"][0]["processes"])


def test_pytorch_ddp_over_ssh_loads_the_modules_on_each_host(site, loopback_sshd, tmp_path):
    """The remote shells get no MODULEPATH from here: the modules load because every process does
    `module use` and `module load` in its own shell; the probe ran over ssh on the first host."""
    record = the_record(run("--cluster", "loopback-ssh", "--case", "pytorch-ddp", "--nodes", "2", "--modules",
                            "site-pytorch/2.13", tmp=tmp_path, case_args=DDP), tmp_path)
    processes = record["repetitions"][0]["processes"]
    assert [(p["host"], p["launch"]) for p in processes] == [("127.0.0.2", "ssh"), ("127.0.0.3", "ssh")]
    assert all("module load site-pytorch/2.13" in p["argv"][2] for p in processes)
    assert record["provenance"]["modules_loaded"] == ["site-python/3.11", "site-pytorch/2.13"]
    assert record["world"]["hosts"] == ["127.0.0.2", "127.0.0.3"]


def test_a_batch_job_on_two_slurm_nodes_loads_the_modules_in_its_script(site, slurm_two_nodes, tmp_path):
    record = the_record(run("--scheduler", "slurm", "--case", "pytorch-ddp", "--nodes", "2", "--modules",
                            "site-pytorch/2.13", tmp=tmp_path, case_args=DDP), tmp_path)
    assert record["world"]["hosts"] == list(NODE_NAMES)
    assert sorted(record["provenance"]["host_info"]) == list(NODE_NAMES)
    assert {p["launch"] for p in record["repetitions"][0]["processes"]} == {"srun"}
    assert record["execution"]["slurm"]["state"] == "COMPLETED"
    assert record["provenance"]["modules_loaded"] == ["site-python/3.11", "site-pytorch/2.13"]
    script = (tmp_path / "runs" / record["run_id"] / "job.sbatch").read_text()
    assert script.index("module load site-pytorch/2.13") < script.index("exec ")
    assert "--modules site-pytorch/2.13" in script


# --- rerun and compare ---------------------------------------------------------------------------

def rerun(path: Path, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite", "rerun", str(path), "--dry-run", "--results-dir",
                           str(tmp / "again"), "--runs-dir", str(tmp / "runs-again")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_a_rerun_shows_a_changed_modulefile_and_a_new_module_version_as_drift(site, ddp_here):
    record, tmp = ddp_here
    [path] = sorted((tmp / "results").glob("*.json"))
    assert rerun(path, tmp).returncode == 0  # the same environment: no drift
    pytorch = site / "modulefiles" / "site-pytorch" / "2.13.lua"
    kept = pytorch.read_text()
    try:
        pytorch.write_text(kept + 'setenv("SITE_NCCL_TUNING", "1")\n')
        shutil.copy(pytorch, pytorch.with_name("2.14.lua"))
        done = rerun(path, tmp)
        drift = [line for line in done.stderr.splitlines() if line.startswith("drift: ")]
        assert done.returncode == 2 and "refused: 1 difference(s)" in done.stderr, done.stderr
        assert drift == ["drift: module site-pytorch: 2.13 in the record, 2.14 now"]
        pytorch.with_name("2.14.lua").unlink()
        done = rerun(path, tmp)
        was = record["provenance"]["environment_files"][str(pytorch)][:12]
        assert done.returncode == 2 and f"drift: file {pytorch}: sha256 {was} in the record, " in done.stderr
    finally:
        pytorch.write_text(kept)
        pytorch.with_name("2.14.lua").unlink(missing_ok=True)


def test_compare_tells_records_of_different_environments_apart(site, ddp_here, tmp_path):
    record, _ = ddp_here
    other = modules.prepare(StackRequest(load_stack("pytorch"), modules=("site-horovod/0.28",), first_host="localhost"),
                            log=lambda m: None).provenance["environment_fingerprint"]
    changed = json.loads(json.dumps(record))
    changed["provenance"].update(stack_lock_sha256=other, environment_fingerprint=other)
    (tmp_path / "a.json").write_text(json.dumps(record))
    (tmp_path / "b.json").write_text(json.dumps(changed))
    done = subprocess.run([sys.executable, "-m", "suite", "compare",
                           str(tmp_path / "a.json"), str(tmp_path / "b.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"not comparable (environment: {record['provenance']['environment_fingerprint']} vs {other})" in done.stdout
