"""Whether a JAX process trains on GPUs (suite/instack/jax_platforms.py): read from the PJRT plugins
installed beside JAX, of any CUDA major (CUDA 12's and CUDA 13's wheels) or ROCm's, from fake installed
packages here; the JAX cases and the interconnect check ask there and nowhere else by a package name; the
jax cuda image's base has the CUDA major of its lock's plugin wheels."""

import ast
import os
import re
from importlib import metadata
from pathlib import Path

import pytest

from suite.instack import jax_platforms
from suite.instack.jax_platforms import jax_gpu_platform, jax_gpu_plugin
from suite.stacks import recipes

ROOT = Path(__file__).resolve().parents[2]
CPU_ONLY = {"jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.12.8", "numpy": "2.4.6"}


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """installed(name=version, ...): these packages, and no others, are what importlib.metadata finds."""
    def install(packages: dict) -> None:
        for name, version in packages.items():
            info = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        monkeypatch.setattr(jax_platforms, "distributions", lambda: metadata.distributions(path=[str(tmp_path)]))
    return install


@pytest.mark.parametrize("plugins, platform", [
    ({"jax-cuda12-plugin": "0.10.2", "jax-cuda12-pjrt": "0.10.2"}, "cuda"),
    ({"jax-cuda13-plugin": "0.11.2", "jax-cuda13-pjrt": "0.11.2"}, "cuda"),  # the H100 of issue 50
    ({"jax_cuda13_plugin": "0.11.2"}, "cuda"),  # a name as a wheel spells it
    ({"jax-cuda14-pjrt": "1.0"}, "cuda"),  # a CUDA major not yet published
    ({"jax-rocm7-plugin": "0.11.2", "jax-rocm7-pjrt": "0.11.2"}, "rocm"),
    ({"jax-rocm60-plugin": "0.4.35"}, "rocm"),
    ({"jaxlib": "0.4.26+cuda12.cudnn89"}, "cuda"),  # an older jaxlib built with CUDA, no plugin
    ({}, None),  # jax[cpu]
    ({"jax-cuda-tools": "1.0", "nvidia-cuda-runtime-cu13": "13.0.96"}, None),  # CUDA libraries, no plugin
])
def test_the_gpu_platform_is_read_from_the_installed_plugins(installed, plugins, platform):
    installed({**CPU_ONLY, **plugins})
    assert jax_gpu_plugin() == platform


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """A host whose nvidia-smi -L lists one H100 (GPUs given) or none."""
    def host(gpus: bool) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'\n" if gpus
                                            else "#!/bin/sh\necho 'No devices were found'\nexit 6\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return host


@pytest.mark.parametrize("major", [12, 13])
def test_a_cuda_plugin_of_either_major_trains_on_the_gpus_the_host_lists(installed, nvidia_smi, monkeypatch, major):
    installed({**CPU_ONLY, f"jax-cuda{major}-plugin": "0.11.2", f"jax-cuda{major}-pjrt": "0.11.2"})
    nvidia_smi(gpus=True)
    assert jax_gpu_platform() == "cuda"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # every GPU hidden
    assert jax_gpu_platform() is None


def test_the_cpu_is_chosen_without_a_plugin_or_without_a_gpu(installed, nvidia_smi, monkeypatch):
    installed(CPU_ONLY)  # the cpu flavour on a GPU host
    nvidia_smi(gpus=True)
    assert jax_gpu_platform() is None
    installed({"jax-cuda13-plugin": "0.11.2"})
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    assert jax_gpu_platform() is None


def test_rocm_is_named_rocm_and_hidden_by_its_own_variables(installed, monkeypatch):
    installed({**CPU_ONLY, "jax-rocm7-plugin": "0.11.2", "jax-rocm7-pjrt": "0.11.2"})
    monkeypatch.setattr(jax_platforms.os.path, "exists", lambda path: path == "/dev/kfd")
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    assert jax_gpu_platform() == "rocm"
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    assert jax_gpu_platform() is None


def imported_names(path: Path) -> set[str]:
    return {f"{node.module}.{alias.name}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


@pytest.mark.parametrize("asker", ["cases/_shared/jax_dist.py", "suite/instack/allreduce_sweep.py"])
def test_the_cases_and_the_interconnect_check_ask_the_one_function(asker):
    assert "suite.instack.jax_platforms.jax_gpu_platform" in imported_names(ROOT / asker)


PLUGIN_BY_NAME = re.compile(r"jax[-_](cuda|rocm)\d+")


def test_no_code_asks_for_one_plugin_by_its_name():
    """The check of issue 50 (`version("jax-cuda12-plugin")`, which a CUDA 13 stack fails) is not back:
    no string of the suite's or the cases' code, nor an image's smoke test, names a plugin of one major."""
    named = [f"{path.relative_to(ROOT)}: {node.value!r}"
             for folder in ("suite", "cases", "benchmarks") for path in sorted((ROOT / folder).rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and PLUGIN_BY_NAME.search(node.value)]
    named += [f"{fl.id} smoke: {fl.smoke}" for fl in recipes.described_flavours() if PLUGIN_BY_NAME.search(fl.smoke)]
    assert not named, "\n".join(named)


def test_the_check_finds_the_old_name_only_check():
    old = 'from importlib.metadata import version\nversion("jax-cuda12-plugin")\n'
    assert [n.value for n in ast.walk(ast.parse(old)) if isinstance(n, ast.Constant) and PLUGIN_BY_NAME.search(n.value)]


@pytest.mark.parametrize("fl", [fl for fl in recipes.described_flavours()
                                if re.search(r"^jax-cuda\d+-plugin==", fl.lock_path.read_text(), re.M)],
                         ids=lambda fl: fl.id)
def test_the_cuda_base_is_the_cuda_major_of_the_locked_plugin(fl):
    lock_majors = set(re.findall(r"^jax-cuda(\d+)-(?:plugin|pjrt)==", fl.lock_path.read_text(), re.M))
    base_major = re.search(r"nvidia/cuda:(\d+)\.", fl.base)
    assert base_major and lock_majors == {base_major[1]}, (fl.base, lock_majors)
