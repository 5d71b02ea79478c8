"""pytorch-horovod's choice of GPU build (containers/pytorch-horovod/gpu-build.sh, sourced by post-install.sh),
run by bash with fakes: a torch that is or is not a CUDA build, a CUDA toolkit whose nvcc is reached through a
wrapper script elsewhere on PATH (as /usr/local/bin/nvcc on some machines and module systems), torch's NCCL wheel
in the environment. The real build, with a real toolkit, is the stack's own install (containers/README.md)."""

import os
import subprocess
from pathlib import Path

from conftest import ROOT

SCRIPT = ROOT / "containers" / "pytorch-horovod" / "gpu-build.sh"
FAKE_PYTHON = """#!/bin/sh
case "$2" in
  *version.cuda*) [ -n "$FAKE_TORCH_CUDA" ] ;;
  *CUDA_HOME*) echo "$FAKE_TORCH_SEES" ;;
  *) exit 3 ;;
esac
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def machine(tmp_path: Path, whole: bool = True) -> dict:
    """A toolkit (include/cuda_runtime.h where whole), its nvcc reached by a wrapper in another folder, a fake
    python, and an environment holding torch's NCCL wheel."""
    toolkit = tmp_path / "cuda-13.0"
    executable(toolkit / "bin" / "nvcc", '#!/bin/sh\necho "#$ _HERE_=$(cd "$(dirname "$0")" && pwd)"\n')
    if whole:
        (toolkit / "include").mkdir()
        (toolkit / "include" / "cuda_runtime.h").write_text("")
    executable(tmp_path / "wrappers" / "nvcc", f'#!/bin/sh\nexec {toolkit}/bin/nvcc "$@"\n')
    executable(tmp_path / "fake" / "python", FAKE_PYTHON)
    nccl = tmp_path / "stack" / "lib" / "python3.13" / "site-packages" / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text("")
    (nccl / "lib").mkdir()
    (nccl / "lib" / "libnccl.so.2").write_text("")
    return {"toolkit": toolkit, "nccl": nccl, "prefix": tmp_path / "stack",
            "path": f"{tmp_path / 'fake'}:{tmp_path / 'wrappers'}:/usr/bin:/bin"}


def choose(found: dict, last: str = "/nonexistent", **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "CUDA_"))}
    script = (f'set -euo pipefail; source "{SCRIPT}"; choose_gpu_build "{last}"; echo "cuda_home=$cuda_home"; '
              'env | grep -E "^(HOROVOD_|CUDA_HOME=)" || true')
    env = {**clean, "PATH": found["path"], "STACK_PREFIX": str(found["prefix"]), "FAKE_TORCH_CUDA": "",
           "FAKE_TORCH_SEES": "", **env}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)


def exported(done: subprocess.CompletedProcess) -> dict:
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_a_cuda_torch_builds_against_the_toolkit_behind_a_wrapper_nvcc_with_the_nccl_of_its_wheel(tmp_path):
    found = machine(tmp_path)
    done = choose(found, FAKE_TORCH_CUDA="13.0", FAKE_TORCH_SEES=str(tmp_path))  # torch: the wrapper's parent
    assert done.returncode == 0, done.stderr
    env = exported(done)
    assert env["cuda_home"] == env["HOROVOD_CUDA_HOME"] == env["CUDA_HOME"] == str(found["toolkit"])
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_NCCL_INCLUDE"] == str(found["nccl"] / "include")
    assert env["HOROVOD_NCCL_LIB"] == str(found["nccl"] / "lib")
    assert os.readlink(found["nccl"] / "lib" / "libnccl.so") == "libnccl.so.2"


def test_a_cpu_torch_builds_without_gpu_operations_whatever_toolkit_is_at_hand(tmp_path):
    found = machine(tmp_path)
    done = choose(found, FAKE_TORCH_SEES=str(found["toolkit"]))
    env = exported(done)
    assert done.returncode == 0 and env["cuda_home"] == "" and "HOROVOD_GPU_OPERATIONS" not in env, done
    assert not (found["nccl"] / "lib" / "libnccl.so").exists()


def test_the_sites_nccl_and_toolkit_are_kept_and_the_last_place_is_looked_at_last(tmp_path):
    found = machine(tmp_path)
    site = machine(tmp_path / "site")["toolkit"]
    done = choose(found, last=str(site), FAKE_TORCH_CUDA="13.0", HOROVOD_NCCL_HOME="/site/nccl",
                  CUDA_HOME=str(site))
    env = exported(done)
    assert done.returncode == 0 and env["cuda_home"] == str(site) and env["HOROVOD_NCCL_HOME"] == "/site/nccl", done
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and "HOROVOD_NCCL_INCLUDE" not in env
    no_wrapper = {**found, "path": f"{tmp_path / 'fake'}:/usr/bin:/bin"}
    assert exported(choose(no_wrapper, last=str(site), FAKE_TORCH_CUDA="13.0"))["cuda_home"] == str(site)


def test_a_cuda_torch_that_sees_a_partial_toolkit_stops_in_one_line_and_one_that_sees_none_builds_for_cpus(tmp_path):
    found = machine(tmp_path, whole=False)
    done = choose(found, FAKE_TORCH_CUDA="13.0", FAKE_TORCH_SEES=str(tmp_path))
    assert done.returncode == 1 and "not a whole toolkit" in done.stderr and str(tmp_path) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    alone = choose(found, FAKE_TORCH_CUDA="13.0")
    assert alone.returncode == 0 and exported(alone)["cuda_home"] == "" and "HOROVOD_GPU" not in alone.stdout
