import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# support.ci_skips: under CI=true a skip fails the run unless it is allowed there; support.worker_groups: which
# modules share a pytest-xdist worker; support.interrupt: a Ctrl-C lets the workers tear their fixtures down; the
# others hold the fixtures of real daemons (sshd, SLURM, the Docker engine and its images) and of Apptainer and its
# images
pytest_plugins = ["support.ci_skips", "support.cluster_fixtures", "support.docker_fixtures",
                  "support.apptainer_fixtures", "support.worker_groups", "support.interrupt"]


@pytest.fixture
def suite_cli(tmp_path):
    """Runs `python -m suite` as a user would, with records and run directories under tmp_path."""

    def run(*args: str, case_args: tuple[str, ...] = (), timeout: float = 900):
        command = [sys.executable, "-m", "suite", *args]
        if args and args[0] in ("run", "rerun", "resume", "tune"):
            command += ["--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
        if case_args:
            command += ["--", *case_args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)

    run.results = tmp_path / "results"
    run.runs = tmp_path / "runs"
    return run


def installed_stack(name: str, **options):
    """The real stack `name` (containers/<name>), installed where it is not yet (minutes on a fresh machine)."""
    from suite.stacks.install import ensure_installed
    from suite.stacks.recipes import load_stack

    return ensure_installed(load_stack(name), **options)


def install_stacks_of(case_names) -> None:
    """The stacks of these cases installed, before any timed run needs one (from an empty cache the
    pytorch-horovod stack's compile of Horovod alone outlasts a run's timeout)."""
    from suite.inputs.cases import load_case

    for stack in sorted({load_case(name).stack for name in case_names}):
        installed_stack(stack)


@pytest.fixture(scope="session")
def pytorch_stack():
    """The real pytorch-horovod stack, installed once."""
    return installed_stack("pytorch-horovod")


def tiny(case_name: str, **overrides) -> tuple[str, ...]:
    """The case's tiny sizes (the [tiny] table of its case.toml) as case argv; see Case.tiny_args."""
    from suite.inputs.cases import load_case

    return tuple(load_case(case_name).tiny_args(**overrides))


def tiny_tf_cifar_in_memory() -> tuple[str, ...]:
    """tf-cifar where a scheduler or a runtime is the subject: its generated batch, two steps an epoch, and
    ResNet-18 (ResNet50V2's graph takes twice as long to trace). test_tf_cifar.py runs [tiny] itself: the CIFAR
    files, the test pass after training and ResNet50V2."""
    return tiny("tf-cifar", synthetic_input=True, steps_per_epoch=2, model="resnet18")


# Real components the tests need (sshd, SLURM, Chromium ...) that were not there: component -> why.
UNAVAILABLE: dict[str, str] = {}


def component_unavailable(component: str, reason: str) -> None:
    """Fails the test under CI=true (CI must not go green by skipping what it was meant to test),
    skips it elsewhere; either way the component is named in the summary at the end of the session."""
    in_ci = os.environ.get("CI") == "true"
    UNAVAILABLE[component] = f"{reason} ({'failed: CI=true' if in_ci else 'skipped'})"
    if in_ci:
        pytest.fail(f"{component} is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{component} not available: {reason}")


# Headless Chromium, where the report's pages are rendered (Playwright drives it)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        component_unavailable("Chromium", "chromium is not on PATH (tools/install-test-deps.sh, run by make test, "
                              "installs it)")
    return found


# Figures a session fixture measured (how long the images took to build ...), printed at the end.
MEASURED: list[str] = []


def pytest_configure(config):
    """The controller (or a run without workers) names the folder where xdist workers leave their
    MEASURED and UNAVAILABLE for its summary; workers inherit it through the environment."""
    if not hasattr(config, "workerinput"):
        folder = tempfile.mkdtemp(prefix="hpc-dl-bench-summary-")
        os.environ["SUITE_TEST_SUMMARY_DIR"] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


def pytest_sessionfinish(session):
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker and (MEASURED or UNAVAILABLE) and "SUITE_TEST_SUMMARY_DIR" in os.environ:
        summary = {"measured": MEASURED, "unavailable": UNAVAILABLE}
        (Path(os.environ["SUITE_TEST_SUMMARY_DIR"]) / f"{worker}.json").write_text(json.dumps(summary))


def pytest_terminal_summary(terminalreporter):
    measured, unavailable = list(MEASURED), dict(UNAVAILABLE)
    for left in sorted(Path(os.environ.get("SUITE_TEST_SUMMARY_DIR", "/nonexistent")).glob("*.json")):
        summary = json.loads(left.read_text())
        measured += summary["measured"]
        unavailable.update(summary["unavailable"])
    if measured:
        terminalreporter.write_sep("-", "measured by the session's fixtures")
        for line in measured:
            terminalreporter.write_line(line)
    if unavailable:
        terminalreporter.write_sep("-", "components not available (their tests did not run)")
        for component, why in sorted(unavailable.items()):
            terminalreporter.write_line(f"{component}: {why}")


def small_jpeg_tree(case: str, folder: Path) -> Path:
    """`make data CASE=<case> SYNTHETIC=1`, small: 3 classes of 8 training JPEGs under folder/imagefolder."""
    subprocess.run([sys.executable, "-m", "suite", "data", "--case", case, "--synthetic", "--data-dir", str(folder),
                    "--", "--classes", "3", "--train-per-class", "8", "--val-per-class", "0"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    return folder


def records_in(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


os.environ.setdefault("PYTHONUNBUFFERED", "1")
# Two pytest workers share this machine's cores, and the cases size their thread pools to the cores they are
# given, not to what the other worker runs: OpenMP's threads that spin while they wait (libgomp's default, the
# CPU builds of PyTorch and MXNet) then hold cores the other worker's threads need (a two-node SLURM job of the
# tests, whose nodes share the cores, trained ~20 times slower). Passive waiting is what a site sets where jobs
# share nodes; a record keeps it (OMP_* is recorded and goes with the processes: suite/base/env_policy.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Every case process times its matmul peak: a quarter of a second of products rather than a second, for
# the few hundred small runs here (the figure's rounds are 0.1 s; test_utilisation.py times the default).
os.environ.setdefault("SUITE_MATMUL_PEAK_SECONDS", "0.25")
# The tests run the CPU paths on every machine, GPU hosts included (there `make gpu-check` runs the GPU
# paths): CUDA sees no device, so runs take the cpu flavour and worker processes, while what the host
# has (nvidia-smi's list, NVML) stays visible to the checks that report it. SUITE_TEST_ON_GPUS=1 keeps
# the GPUs visible to the tests.
if os.environ.get("SUITE_TEST_ON_GPUS") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
# The cases' FLOP counts go to a cache of this test run's own (suite/instack/model_flops.py), never the
# user's: a count cached earlier (by another run, or with other options) must not stand in for the one
# the code under test makes.
FLOPS_CACHE = Path(tempfile.mkdtemp(prefix="hpc-dl-bench-flops-"))
os.environ["SUITE_FLOPS_CACHE"] = str(FLOPS_CACHE / "flops-per-sample.json")
atexit.register(shutil.rmtree, FLOPS_CACHE, ignore_errors=True)
# JAX compiles each program once per test session: its persistent compilation cache in a folder of the session's
# own (made by the controller, its workers inherit it), every program kept (the default keeps only those that took a
# second). The JAX cases' dozens of runs repeat a few programs; compiling them again cost about a third of the CPU
# time of the JAX tests. JAX_* goes with the processes to other hosts and into containers (suite/base/env_policy.py):
# the folder is writable for the unprivileged users that Apptainer and Podman run as; where a container cannot
# reach it, JAX compiles as without it. Only process 0 of a run writes it, so process 0 has its programs long before
# the others: the JAX cases wait for every process before the first step (cases/_shared/jax_dist.py).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    JAX_CACHE = Path(tempfile.mkdtemp(prefix="hpc-dl-bench-jax-cache-"))
    JAX_CACHE.chmod(0o777)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(JAX_CACHE)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    atexit.register(shutil.rmtree, JAX_CACHE, ignore_errors=True)


def listed_gpus() -> int:
    """The NVIDIA GPUs this host has, as nvidia-smi lists them (whatever CUDA_VISIBLE_DEVICES says)."""
    from suite.inputs.host_gpus import count_from_probe

    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return count_from_probe(listed)


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity mask), in order."""
    return sorted(os.sched_getaffinity(0))


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration/ launches something real: it carries the integration marker."""
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)


def path_without(folder: Path, left_out) -> Path:
    """A folder of links to every program on this host's PATH (the first of each name) but those left_out(name):
    a PATH like this host's without some programs."""
    folder.mkdir()
    for where in dict.fromkeys(os.environ["PATH"].split(os.pathsep)):
        for program in Path(where).glob("*") if Path(where).is_dir() else ():
            if not left_out(program.name) and not (folder / program.name).exists():
                (folder / program.name).symlink_to(program)
    return folder
