"""Stacks on the machines users have: the flavour that fits the host (cuda where nvidia-smi lists GPUs,
cpu otherwise), GPU counts checked before launch, installs from a standard index or from a wheel
folder with no network, and launchers that adapt to the framework version they find."""

import io
import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, installed_stack, tiny
from support.gpus import GPU_LINE, fake_nvidia_smi

from suite.base.errors import UsageError
from suite.execution.plan import Launch, StackEnv
from suite.inputs import host_gpus
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import Host, World
from suite.launchers import torchrun
from suite.stacks import lock_targets, wheelhouse
from suite.stacks.install import MARKER, ensure_installed, install_argv, local_flavour, local_prefix
from suite.stacks.locks import lock_pins
from suite.stacks.recipes import load_flavour, load_stack


@pytest.fixture
def with_gpus(tmp_path, monkeypatch):
    """Puts a fake nvidia-smi listing N GPUs first on PATH (this process and its children)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(count: int) -> dict:
        folder = fake_nvidia_smi(tmp_path / f"gpus-{count}", count)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        return dict(os.environ)

    return install


# --- the flavour that fits the host ---------------------------------------------------------------

def test_without_a_fake_the_flavour_follows_what_this_host_has():
    expected = "cuda" if host_gpus.host_gpus() else "cpu"
    assert local_flavour(load_stack("pytorch"), None).name == expected


def test_a_gpu_host_gets_the_cuda_flavour_and_flavour_overrides(with_gpus):
    with_gpus(2)
    assert host_gpus.host_gpus() == 2
    assert local_flavour(load_stack("pytorch"), None).name == "cuda"
    assert local_flavour(load_stack("pytorch"), "cpu").name == "cpu"
    with_gpus(0)
    assert host_gpus.host_gpus() == 0 and local_flavour(load_stack("pytorch"), None).name == "cpu"


def test_cuda_visible_devices_narrows_the_count(with_gpus, monkeypatch):
    with_gpus(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert host_gpus.host_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert host_gpus.host_gpus() == 0


def test_an_image_only_flavour_stands_back_for_cpu_unless_asked_for(with_gpus):
    with_gpus(1)
    said = []
    assert local_flavour(load_stack("mxnet"), None, log=said.append).name == "cpu"
    assert any("NVIDIA's MXNet image" in line for line in said)
    with pytest.raises(UsageError, match="stack mxnet has no local cuda flavour"):
        local_flavour(load_stack("mxnet"), "cuda")


def test_flavours_differ_in_folder_and_recipe_and_read_container_toml():
    cpu, cuda = (load_flavour(load_stack("pytorch"), name) for name in ("cpu", "cuda"))
    assert local_prefix(cpu).name.startswith("pytorch-cpu-")
    assert local_prefix(cuda).name.startswith("pytorch-cuda-")
    assert cpu.recipe_sha256 != cuda.recipe_sha256
    assert cpu.pip_extra_index == "https://download.pytorch.org/whl/cpu" and not cuda.pip_extra_index
    assert cuda.lock_path == ROOT / "containers" / "pytorch" / "cuda" / "requirements.lock"


# --- where packages come from ---------------------------------------------------------------------

def test_this_hosts_pip_settings_have_the_cpu_build_so_no_extra_index_is_named():
    """pip here has torch's CPU build in its find-links: the install leaves PyTorch's index out (it does
    not answer from here) and the lock's hash picks the local file."""
    cpu = load_flavour(load_stack("pytorch"), "cpu")
    pinned_here = lock_targets.here() == lock_targets.Target("3.11", "x86_64")  # the lock's header says where
    assert cpu.extra_index_builds() == ((("torch", "2.13.0+cpu"),) if pinned_here else ())
    wheelhouse.pip_offers.cache_clear()
    argv = install_argv(cpu, "/stack/bin/python")
    assert "--extra-index-url" not in argv and argv[-2:] == ["-r", str(cpu.lock_path)]
    assert "--require-hashes" in argv and "--no-deps" in argv


def offline_env(home: Path) -> dict:
    """This machine with pip's settings removed (no config file, no PIP_*) and no network: what a
    compute node without internet has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    dead = "http://127.0.0.1:9"
    return {**env, "PIP_CONFIG_FILE": os.devnull, "SUITE_STACK_HOME": str(home), "HTTP_PROXY": dead,
            "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead, "NO_PROXY": "", "no_proxy": ""}


def test_a_cpu_stack_installs_from_a_wheel_folder_with_no_pip_settings_and_no_network(tmp_path):
    """`make wheels` where the index is (this machine's settings), then `make install WHEELS=...` on a
    machine whose pip knows nothing and reaches nothing."""
    wheels = tmp_path / "wheels"
    filled = subprocess.run([sys.executable, "-m", "suite", "wheels", "--stack", "pytorch", "--flavour", "cpu",
                             "--dest", str(wheels)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    assert "pytorch/cpu:" in filled.stdout and "MB added" in filled.stdout
    cpu = load_flavour(load_stack("pytorch"), "cpu")
    files = {p.name.split("-")[0].lower().replace("_", "-") for p in wheels.iterdir()}
    assert {name.replace("_", "-") for name in lock_pins(cpu.lock_path)} <= files

    env = offline_env(tmp_path / "home")
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=env, capture_output=True, text=True)
    assert "find-links" not in config.stdout and "index" not in config.stdout  # positive control: nothing left
    done = subprocess.run([sys.executable, "-m", "suite", "install", "--stack", "pytorch", "--flavour", "cpu",
                           "--wheels", str(wheels)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = Path(done.stdout.strip().splitlines()[-1])
    assert prefix.parent == tmp_path / "home" and prefix.name.startswith("pytorch-cpu-")
    info = json.loads((prefix / MARKER).read_text())
    assert info["installed_from"] == str(wheels.resolve()) and info["flavour"] == "cpu"
    assert info["packages"]["torch"] == lock_pins(cpu.lock_path)["torch"] == "2.13.0+cpu"  # the build the lock pins

    no_wheels = subprocess.run([sys.executable, "-m", "suite", "install", "--stack", "mxnet", "--flavour", "cpu"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert no_wheels.returncode == 1 and "make wheels" in no_wheels.stderr  # the way out is named


# --- GPU counts before launch ---------------------------------------------------------------------

def run_dry(suite_cli, *args):
    return suite_cli("run", "--dry-run", "--case", "pytorch-ddp", "--telemetry-interval", "0", *args,
                     case_args=tiny("pytorch-ddp"))


def test_more_devices_than_gpus_are_refused_before_anything_starts(suite_cli, with_gpus):
    with_gpus(1)
    for dry in ([], ["--dry-run"]):
        result = suite_cli("run", "--case", "pytorch-ddp", "--gpus-per-node", "2", *dry, case_args=tiny("pytorch-ddp"))
        assert result.returncode == 2, result.stdout + result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line == "error: GPUS_PER_NODE=2 but host localhost has 1 GPU(s) (nvidia-smi -L); ask for at most 1"
        assert not suite_cli.runs.exists() or not any(suite_cli.runs.iterdir())
        assert not suite_cli.results.exists()


def test_a_gpu_hosts_count_is_the_default_unless_a_hostfile_says_otherwise(suite_cli, with_gpus, tmp_path):
    with_gpus(2)
    shown = run_dry(suite_cli)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "1 node(s), 2 device(s)" in shown.stdout and "--nproc-per-node 2" in shown.stdout
    assert "stack pytorch/cuda" in shown.stdout  # the cuda flavour (installed or not: the dry run names it)
    hostfile = tmp_path / "one"
    hostfile.write_text("localhost slots=1\n")
    shown = run_dry(suite_cli, "--hostfile", str(hostfile))
    assert shown.returncode == 0 and "1 node(s), 1 device(s)" in shown.stdout, shown.stdout + shown.stderr
    shown = run_dry(suite_cli, "--gpus-per-node", "1", "--flavour", "cpu")
    assert "1 device(s)" in shown.stdout and "pytorch/cuda" not in shown.stdout


def test_a_cpu_host_keeps_devices_as_worker_processes(suite_cli, with_gpus):
    with_gpus(0)
    shown = run_dry(suite_cli, "--gpus-per-node", "3")
    assert shown.returncode == 0 and "1 node(s), 3 device(s)" in shown.stdout, shown.stdout + shown.stderr


def test_gpu_counts_are_read_per_host_and_compared():
    two = f"{GPU_LINE.format(i=0)}\n{GPU_LINE.format(i=1)}\nCUDA_VISIBLE_DEVICES=(unset)\n"
    assert host_gpus.count_from_probe(two) == 2
    assert host_gpus.count_from_probe("no nvidia-smi\nCUDA_VISIBLE_DEVICES=(unset)\n") == 0
    host_gpus.check_devices({"a": 4, "b": 4}, {"a": 4, "b": None}, "GPUS_PER_NODE")  # b unknown: not refused
    host_gpus.check_devices({"a": 8}, {"a": 0}, "GPUS_PER_NODE")  # a CPU host: worker processes
    with pytest.raises(UsageError, match="GPUS_PER_NODE=4 but host b has 2 GPU"):
        host_gpus.check_devices({"a": 4, "b": 4}, {"a": 4, "b": 2}, "GPUS_PER_NODE")


# --- launchers and cases adapt to the framework they find ----------------------------------------

def stack_with(torch_version: str | None, **others: str) -> StackEnv:
    packages = {"torch": torch_version, **others} if torch_version else others
    return StackEnv("local", "/stack/bin", provenance={"stack_packages": packages})


def torchrun_argv(torch_version: str | None) -> list[str]:
    world = World((Host("node1", 2),), "test")
    launch = Launch("train.py", [], world, stack_with(torch_version), "/runs/r/rep-0", "/data", {"backend": "auto"})
    return torchrun.plan(launch).processes[0].argv


def test_torchrun_gets_only_the_options_its_torch_has():
    assert "--shutdown-timeout" in torchrun_argv("2.13.0+cpu") and "--shutdown-timeout" in torchrun_argv(None)
    old = torchrun_argv("2.11.0+cu130")
    assert "--shutdown-timeout" not in old and "--local-addr" in old and "--rdzv-conf" in old


def test_every_option_the_launcher_writes_is_one_the_stacks_torchrun_accepts():
    """The real torchrun of the pytorch stack parses the launcher's command line."""
    installed = installed_stack("pytorch")
    argv = torchrun_argv(installed.info["packages"]["torch"])[1:]
    code = ("import sys; from torch.distributed.run import get_args_parser; "
            "a = get_args_parser().parse_args(sys.argv[1:]); print(a.nnodes, a.nproc_per_node, a.training_script)")
    done = subprocess.run([str(installed.python), "-c", code, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "2", "train.py"]


def test_a_framework_too_old_for_the_case_is_refused_naming_both_versions():
    case, imported = load_case("pytorch-ddp"), {"numpy": "2.4.6", "Pillow": "13.0.0"}
    case.check_requirements(stack_with("2.13.0+cpu", **imported), "runtime local")
    case.check_requirements(stack_with("2.3.1+cu121", **imported), "runtime local")  # the lowest it has run on
    with pytest.raises(UsageError, match=r"case pytorch-ddp needs torch>=2.3; the stack \(runtime modules\) has "
                                         r"torch 2.2.2"):
        case.check_requirements(stack_with("2.2.2", **imported), "runtime modules")
    with pytest.raises(UsageError, match="has no torch"):
        case.check_requirements(stack_with(None, **imported), "runtime modules")
    with pytest.raises(UsageError,
                       match=r"^case pytorch-ddp needs pillow; the stack \(runtime modules\) has no pillow$"):
        case.check_requirements(stack_with("2.13.0", numpy="2.4.6"), "runtime modules")


def test_the_horovod_case_takes_the_versions_it_has_run_on_and_refuses_older_ones():
    case = load_case("pytorch-synthetic")
    case.check_requirements(stack_with("2.3.1+cu121", horovod="0.28.1", numpy="2.4.6"), "runtime modules")
    with pytest.raises(UsageError, match=r"^case pytorch-synthetic needs horovod>=0.28.1; the stack \(runtime "
                                         r"modules\) has horovod 0.27.0$"):
        case.check_requirements(stack_with("2.3.1", horovod="0.27.0", numpy="2.4.6"), "runtime modules")
    with pytest.raises(UsageError, match=r"needs torch>=2.3; .* has torch 2.2.2$"):
        case.check_requirements(stack_with("2.2.2", horovod="0.28.1", numpy="2.4.6"), "runtime modules")


def test_mxnet_and_tf_keras_older_than_the_cases_have_run_on_are_refused():
    load_case("mxnet-imagenet").check_requirements(stack_with(None, mxnet="1.9.1", numpy="1.23.5"), "runtime local")
    with pytest.raises(UsageError, match=r"needs mxnet>=1.9.1; .* has mxnet 1.6.0$"):
        load_case("mxnet-imagenet").check_requirements(stack_with(None, mxnet="1.6.0", numpy="1.23.5"), "runtime local")
    tf = load_case("tf-cifar")
    tf.check_requirements(stack_with(None, **{"tf-keras": "2.15.1", "numpy": "1.26.4"}), "runtime local")
    with pytest.raises(UsageError, match=r"needs tf-keras>=2.15; .* has tf-keras 2.14.1$"):
        tf.check_requirements(stack_with(None, **{"tf-keras": "2.14.1", "numpy": "1.26.4"}), "runtime local")


class RemoteFile(io.RawIOBase):
    """A file on an HTTP server read by range requests: enough of a wheel for zipfile to take one
    member out of it without downloading the rest (torch's wheels are over 500 MB)."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as answer:
            self.size = int(answer.headers["Content-Length"])

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, buffer):
        end = min(self.size, self.pos + len(buffer)) - 1
        if end < self.pos:
            return 0
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            data = answer.read()
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def torchrun_source(version: str) -> str:
    """torch/distributed/run.py of a torch release, from its Linux wheel on PyPI."""
    accept = {"Accept": "application/vnd.pypi.simple.v1+json"}
    with urllib.request.urlopen(urllib.request.Request("https://pypi.org/simple/torch/", headers=accept),
                                timeout=60) as answer:
        files = json.load(answer)["files"]
    url = next(f["url"] for f in files if f["filename"].startswith(f"torch-{version}-cp311-cp311-manylinux")
               and f["filename"].endswith("x86_64.whl"))
    return zipfile.ZipFile(io.BufferedReader(RemoteFile(url), 1 << 20)).read("torch/distributed/run.py").decode()


def test_an_older_torchrun_accepts_the_command_line_made_for_its_version(tmp_path):
    """torch 2.11's own torchrun parser (its run.py, taken from its wheel on the package index and run
    with the stack's torch): the launcher's line for 2.11 parses; the line for 2.13 fails as it did
    on a site's H100 node (`unrecognized arguments: --shutdown-timeout`)."""
    installed = ensure_installed(load_flavour(load_stack("pytorch"), "cpu"))
    old = tmp_path / "run_2_11.py"
    old.write_text(torchrun_source("2.11.0"))
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('old_run', sys.argv[1]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "a = m.get_args_parser().parse_args(sys.argv[2:]); print(a.nproc_per_node, a.local_addr)")

    def parse(torch_version: str):
        argv = torchrun_argv(torch_version)[1:]
        return subprocess.run([str(installed.python), "-c", code, str(old), *argv], capture_output=True, text=True,
                              timeout=300)

    fits = parse("2.11.0+cu130")
    assert fits.returncode == 0 and fits.stdout.split() == ["2", "node1"], fits.stderr
    newer = parse("2.13.0")
    assert newer.returncode == 2 and "unrecognized arguments: --shutdown-timeout" in newer.stderr
