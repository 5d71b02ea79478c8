"""RUNTIME=podman with Debian's Podman 4.3: the pytorch cpu image the session's Docker engine built
(tests/support/docker_fixtures.py) brought into Podman as users do, `docker save | podman load`, into
storages the tests keep between sessions, and pytorch-ddp with two ranks run through `podman run`: rootless as an
unprivileged user (subordinate ids, HOME and XDG_RUNTIME_DIR of its own) and as root, and as srun steps on
the tests' two SLURM nodes; every other case in its stack's image (every stack's image loaded into root's
Podman) with two ranks on this machine and as srun steps; the check-site row and rerun. Bad input is refused
before anything launches."""

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import MEASURED, ROOT, records_in, tiny
from support.cluster_fixtures import NODE_NAMES, ensure_installed
from support.docker_fixtures import CPU_STACKS, OTHER_CASES
from support.image_runs import check_site_then_rerun, ok_record, suite
from support.pairwise import across, on_this_machine

from suite.execution.plan import StackEnv
from suite.records.schema import validate
from suite.runtimes import podman as podman_runtime
from suite.stacks import images
from suite.stacks.recipes import load_stack

PY = sys.executable
NOBODY = 65534
DDP = tiny("pytorch-ddp", launcher="ranks")
RANKS_ARGV = ["--case", "pytorch-ddp", "--runtime", "podman", "--gpus-per-node", "2"]


def podman_installed() -> None:
    ensure_installed(("/usr/bin/podman", "/usr/bin/catatonit", "/usr/bin/newuidmap"),
                     "Podman (Debian's podman, catatonit, uidmap)")


def mqueue_mounted() -> None:
    """`podman run --ipc=host` binds the host's /dev/mqueue, which systemd mounts at boot and a bare
    container host like this one lacks."""
    if not os.path.ismount("/dev/mqueue"):
        Path("/dev/mqueue").mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "mqueue", "mqueue", "/dev/mqueue"], check=True)


def subordinate_ids() -> None:
    """Rootless Podman maps the image's other ids, and --userns=keep-id, onto the user's ranges."""
    for table in (Path("/etc/subuid"), Path("/etc/subgid")):
        rows = [line.split(":") for line in table.read_text().splitlines()] if table.exists() else []
        if any(row[0] in ("nobody", str(NOBODY)) for row in rows):
            continue
        start = max([100000, *(int(row[1]) + int(row[2]) for row in rows if len(row) == 3)])
        with table.open("a") as out:
            out.write(f"nobody:{start}:65536\n")


def at_most(kind: int) -> str:
    hard = resource.getrlimit(kind)[1]
    value = 32768 if hard == resource.RLIM_INFINITY else min(hard, 32768)
    return f"{value}:{value}"


def store(rootless: bool) -> Path:
    """Each user's Podman, kept between sessions as the Docker engine's data root is (a load costs about
    half a minute): root's in its cache, nobody's in /var/tmp (root's home is root's alone)."""
    if rootless:
        return Path(f"/var/tmp/hpc-dl-bench-podman-{NOBODY}")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpc-dl-bench" / "podman-root"


def podman_home(home: Path, rootless: bool) -> dict:
    """One user's Podman in `home` (storage, run folder, configuration); the environment that selects it."""
    (home / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "storage.conf").write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{home}/storage"\n'
                                       f'runroot = "{home}/run/storage"\n')
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run"),
           "CONTAINERS_STORAGE_CONF": str(home / "storage.conf")}
    if rootless:
        # the user's own XDG folders, as a user has them: root's (CI sets XDG_CACHE_HOME) would move where
        # rootless Podman keeps its state, and the image loaded under one would be unknown under the other
        for name in ("cache", "config", "data"):
            (home / name).mkdir(exist_ok=True)
            env[f"XDG_{name.upper()}_HOME"] = str(home / name)
        home.chmod(0o700)
        for path in (home, home / "run", home / "storage.conf", home / "cache", home / "config", home / "data"):
            os.chown(path, NOBODY, NOBODY)
    else:  # root without CAP_SYS_RESOURCE (this sandbox) cannot raise nofile and nproc to podman's defaults
        (home / "containers.conf").write_text('[containers]\ndefault_ulimits = ['
                                              f'"nofile={at_most(resource.RLIMIT_NOFILE)}", '
                                              f'"nproc={at_most(resource.RLIMIT_NPROC)}"]\n')
        env["CONTAINERS_CONF"] = str(home / "containers.conf")
    return env


def as_user(rootless: bool) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if rootless else []


def podman(env: dict, rootless: bool, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*as_user(rootless), "podman", *args], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300, check=False, **kw)


def stop_pause_process(home: Path) -> None:
    """Rootless Podman leaves a pause process holding its user namespace; it ends with the tests."""
    pid = home / "run" / "libpod" / "tmp" / "pause.pid"
    if pid.exists():
        subprocess.run(["kill", pid.read_text().strip()], check=False)


def load(env: dict, rootless: bool, meta: dict) -> None:
    """`docker save TAG | podman load` where this user's storage lacks the image; older ones of its
    repository, and images left without a tag, go first."""
    found = podman(env, rootless, "image", "inspect", "--format={{.Id}}", meta["image"])
    if found.returncode == 0 and found.stdout.strip().removeprefix("sha256:") == meta["image_sha256"]:
        return
    repository = meta["image"].rsplit(":", 1)[0]
    older = podman(env, rootless, "images", "--quiet", f"--filter=reference={repository}").stdout.split()
    podman(env, rootless, "rmi", *older)  # not --force: another session's running container keeps its image
    podman(env, rootless, "image", "prune", "--force")
    started = time.monotonic()
    with subprocess.Popen(["docker", "save", meta["image"]], stdout=subprocess.PIPE) as save:
        loaded = podman(env, rootless, "load", "--quiet", stdin=save.stdout)
    assert save.returncode == 0 and loaded.returncode == 0, loaded.stderr[-2000:]
    MEASURED.append(f"podman: docker save | podman load ({'rootless' if rootless else 'root'}) of {meta['stack']}'s "
                    f"cpu image in {time.monotonic() - started:.0f} s")


@pytest.fixture(scope="module")
def podman_ready():
    podman_installed()
    mqueue_mounted()
    yield
    # root's Podman mounts its overlay folder onto itself and leaves it so; the kept storage is left unmounted
    overlay = store(rootless=False) / "storage" / "overlay"
    if os.path.ismount(overlay):
        subprocess.run(["umount", str(overlay)], check=False)


@pytest.fixture(scope="module")
def image_dir(cpu_images, podman_ready):  # the engine's fixture first: it skips where the tests are not root
    """The Docker build's metadata of the pytorch cpu image, in a folder every user can read."""
    folder = Path(tempfile.mkdtemp(prefix="hpcdl-podman-", dir="/tmp"))
    folder.chmod(0o755)
    shutil.copy(Path(os.environ["SUITE_IMAGE_DIR"]) / "pytorch-cpu.docker.json", folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def every_image_dir(cpu_images, podman_ready):
    """Every stack's Docker build metadata, each image loaded into root's Podman."""
    env = podman_home(store(rootless=False), rootless=False)
    for stack in CPU_STACKS:
        load(env, False, cpu_images[stack])
    return Path(os.environ["SUITE_IMAGE_DIR"]), env


@pytest.fixture(params=["rootless", "root"])
def loaded(request, image_dir, cpu_images):
    """A user's Podman holding the image: (metadata folder, metadata, the Podman's env, rootless)."""
    rootless = request.param == "rootless"
    if rootless:
        subordinate_ids()
    home = store(rootless)
    env = podman_home(home, rootless)
    try:
        load(env, rootless, cpu_images["pytorch"])
        yield image_dir, cpu_images["pytorch"], env, rootless
    finally:
        stop_pause_process(home)


def run_ddp(folder: Path, env: dict, out: Path, rootless: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, **env, "SUITE_IMAGE_DIR": str(folder), "OMP_NUM_THREADS": "1"}
    python = [PY]
    if rootless:
        # The runner's Python lives under /root (mode 0700 here): Debian's python3 of the same version runs
        # it over the runner's packages (and the checkout, for the telemetry sampler); ranks use the image's.
        site = next(str(p) for p in (ROOT / ".venv/lib").glob("python3*/site-packages"))
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=f"{site}:{ROOT}")
        python = ["/usr/bin/python3"]
    # A profile setting a variable the environment policy does not forward: podman passes only those it is named.
    profile = out / "site.toml"
    profile.write_text('[env]\nRDMAV_FORK_SAFE = "1"\n')
    argv = [*as_user(rootless), *python, "-m", "suite", "run", *RANKS_ARGV, "--cluster", str(profile),
            "--runs-dir", str(out / "runs"), "--results-dir", str(out / "results"), "--", *DDP]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_ddp_ranks_train_in_the_image(loaded):
    folder, meta, env, rootless = loaded
    if rootless:
        same = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, check=False).stdout.strip()
        if not shutil.which("setpriv") or same != str(sys.version_info[:2]):
            pytest.skip("needs setpriv and Debian's python3 of the runner's version")
    out = Path(tempfile.mkdtemp(prefix="hpcdl-podman-run-", dir="/tmp"))
    if rootless:
        os.chown(out, NOBODY, NOBODY)
    try:
        check_ddp(folder, meta, env, out, rootless)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def check_ddp(folder: Path, meta: dict, env: dict, out: Path, rootless: bool) -> None:
    started = time.monotonic()
    result = run_ddp(folder, env, out, rootless)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    MEASURED.append(f"podman: pytorch-ddp, 2 ranks ({'rootless' if rootless else 'root'}) in "
                    f"{time.monotonic() - started:.0f} s")
    [record] = records_in(out / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    prov = record["provenance"]
    assert prov["runtime"] == "podman" and prov["image"] == meta["image"]
    assert prov["image_sha256"] == meta["image_sha256"]  # the Docker image's ID is the one Podman loaded
    assert prov["stack_lock_sha256"] == images.load_flavour(load_stack("pytorch"), "cpu").lock_sha256
    assert record["metrics"]["throughput"]["mean"] > 0
    assert record["execution"]["cluster_env_not_seen"] == [] and record["execution"]["cluster_env"]  # in the image
    ranks = record["repetitions"][0]["processes"]
    assert len(ranks) == 2
    for rank in ranks:
        assert rank["argv"][:3] == [shutil.which("podman"), "run", "--rm"]
        assert ("--userns=keep-id" in rank["argv"]) == rootless
        assert rank["argv"][rank["argv"].index(meta["image"]) + 1] == "/opt/stack/bin/python"
    session = next(a for a in ranks[0]["argv"] if a.startswith("--label=")).removeprefix("--label=")
    left = podman(env, rootless, "ps", "--all", "--quiet", f"--filter=label={session}")
    assert left.returncode == 0 and left.stdout.strip() == "", left.stdout + left.stderr  # --rm, then cleanup


def test_cleanup_removes_the_sessions_containers_a_killed_client_left(image_dir, cpu_images, monkeypatch):
    """`podman run --rm` removes its container unless its client is killed outright; the runtime's cleanup
    removes those of its session by their label, and no other."""
    env = podman_home(store(rootless=False), rootless=False)
    load(env, False, cpu_images["pytorch"])
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    label = f"{podman_runtime.SESSION_LABEL}=" + "ab" * 8
    ids = [podman(env, False, "run", "--detach", f"--label={podman_runtime.SESSION_LABEL}={session}",
                  cpu_images["pytorch"]["image"], "sleep", "60").stdout.strip() for session in ("ab" * 8, "cd" * 8)]
    said = []
    stack_env = StackEnv("podman", "/opt/stack/bin", prefix=("/usr/bin/podman", "run", f"--label={label}"))
    try:
        podman_runtime.cleanup(stack_env, said.append)
        left = podman(env, False, "ps", "--all", "--quiet", "--no-trunc").stdout.split()
        assert said == ["podman: removed 1 container(s) that outlived their process"]
        assert ids[0] not in left and ids[1] in left
    finally:
        podman(env, False, "rm", "--force", "--ignore", "--time=0", *ids)


@pytest.fixture
def image_meta(tmp_path):
    """The Docker build's metadata of an image no Podman storage holds."""
    fl = images.load_flavour(load_stack("pytorch"), "cpu")
    images.write_image_meta(tmp_path / "pytorch-cpu.docker.json", fl, "hpc-dl-bench-pytorch:cpu-absent", "d0" * 32,
                            "docker", {}, {}, {"kind": "debian"})
    return tmp_path


def refused(env: dict, out: Path) -> subprocess.CompletedProcess:
    argv = [PY, "-m", "suite", "run", *RANKS_ARGV, "--runs-dir", str(out / "runs"), "--results-dir",
            str(out / "results"), "--", *DDP]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stdout + done.stderr
    assert not (out / "results").exists() or not records_in(out / "results")
    return done


def test_a_missing_podman_is_refused_with_the_install_hint(image_meta, tmp_path):
    env = {**os.environ, "SUITE_IMAGE_DIR": str(image_meta), "PATH": str(tmp_path / "bin")}
    said = refused(env, tmp_path).stderr
    assert "RUNTIME=podman needs podman on PATH" in said and "apt-get install podman" in said


def test_an_image_not_in_podmans_storage_is_refused_with_the_load_line(image_meta, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("uses root's Podman of the tests")
    podman_installed()
    # root's kept storage: a fresh one in tmp_path would leave its overlay folder mounted
    env = {**os.environ, **podman_home(store(rootless=False), rootless=False), "SUITE_IMAGE_DIR": str(image_meta)}
    said = refused(env, tmp_path).stderr
    assert "podman has no image hpc-dl-bench-pytorch:cpu-absent in this user's storage" in said
    assert "docker save hpc-dl-bench-pytorch:cpu-absent | podman load" in said


def test_ddp_ranks_as_srun_steps_on_two_slurm_nodes_in_the_image(image_dir, cpu_images, slurm_two_nodes, tmp_path):
    """A batch job on the tests' two SLURM nodes whose runner starts each rank as an srun step running
    `podman run` (root's Podman: the nodes share its storage, as nodes share a site's image store)."""
    home = store(rootless=False)
    env = podman_home(home, rootless=False)
    load(env, False, cpu_images["pytorch"])
    argv = [PY, "-m", "suite", "run", "--case", "pytorch-ddp", "--runtime", "podman", "--scheduler", "slurm",
            "--nodes", "2", "--gpus-per-node", "1", "--timeout", "300", "--no-precheck",
            "--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results"), "--", *DDP]
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, **env, "SUITE_IMAGE_DIR": str(image_dir),
                                               "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "ok", record["reason"]
    assert record["execution"]["slurm"]["state"] == "COMPLETED"
    assert record["provenance"]["image_sha256"] == cpu_images["pytorch"]["image_sha256"]
    rep = record["repetitions"][0]
    assert [(p["host"], p["launch"]) for p in rep["processes"]] == [(NODE_NAMES[0], "srun"), (NODE_NAMES[1], "srun")]
    assert rep["ran_on"] == {"rank-0": [NODE_NAMES[0]], "rank-1": [NODE_NAMES[1]]}
    assert all(p["argv"][:2] == [shutil.which("podman"), "run"] for p in rep["processes"])


@pytest.mark.parametrize("case, where", across("podman", OTHER_CASES, schedulers=("slurm",)))
def test_every_case_as_srun_steps_on_two_slurm_nodes_in_its_stacks_image(every_image_dir, cpu_images,
                                                                        slurm_two_nodes, case, where, tmp_path):
    """A rank per node, each a `podman run` started by srun (those of tests/support/pairwise.py in `make test`,
    the rest in `make test-all`); Horovod's ranks Gloo's (see test_apptainer_clusters.py)."""
    folder, env = every_image_dir
    stack, case_args = OTHER_CASES[case]
    gloo = {"HOROVOD_CONTROLLER": "gloo"} if case == "pytorch-synthetic" else {}
    done = suite({**os.environ, **env, "SUITE_IMAGE_DIR": str(folder), "OMP_NUM_THREADS": "1", **gloo}, "run",
                 "--case", case, "--runtime", "podman", "--scheduler", "slurm", "--nodes", "2", "--gpus-per-node", "1",
                 "--timeout", "300", "--no-precheck", "--runs-dir", str(tmp_path / "runs"), "--results-dir",
                 str(tmp_path / "results"), "--", *case_args)
    record = ok_record(done, tmp_path / "results")
    assert record["execution"]["slurm"]["state"] == "COMPLETED"
    assert record["provenance"]["image_sha256"] == cpu_images[stack]["image_sha256"]
    processes = record["repetitions"][0]["processes"]
    assert {p["host"] for p in processes} == set(NODE_NAMES) and {p["launch"] for p in processes} == {"srun"}
    podman_bin = shutil.which("podman")
    assert all(podman_bin in p["argv"] and cpu_images[stack]["image"] in p["argv"] for p in processes)


# in `make test` the cases that cross no hosts in this runtime's image (tests/support/pairwise.py)
@pytest.mark.parametrize("case", on_this_machine("podman", OTHER_CASES))
def test_the_case_trains_in_its_stacks_image(every_image_dir, cpu_images, case, tmp_path):
    """Each case, two ranks on this machine, every process a `podman run` of its stack's image (root's Podman)."""
    folder, env = every_image_dir
    stack, case_args = OTHER_CASES[case]
    done = suite({**os.environ, **env, "SUITE_IMAGE_DIR": str(folder), "OMP_NUM_THREADS": "1"}, "run", "--case", case,
                 "--runtime", "podman", "--gpus-per-node", "2", "--runs-dir", str(tmp_path / "runs"), "--results-dir",
                 str(tmp_path / "results"), "--", *case_args)
    record = ok_record(done, tmp_path / "results")
    prov, meta = record["provenance"], cpu_images[stack]
    assert (prov["runtime"], prov["stack"], prov["image"]) == ("podman", stack, meta["image"])
    assert prov["image_sha256"] == meta["image_sha256"]
    assert record["world"]["devices"] == 2 and record["metrics"]["throughput"]["mean"] > 0
    for process in record["repetitions"][0]["processes"]:
        assert process["argv"][:2] == [shutil.which("podman"), "run"] and meta["image"] in process["argv"]


def test_check_site_runs_the_podman_path_and_rerun_uses_the_same_image(every_image_dir, cpu_images, tmp_path):
    """`make check-site`'s podman row runs (ok) and writes a record; `suite rerun` of it runs the same image,
    and refuses, naming both IDs, where the tag it would run now holds another image."""
    folder, env = every_image_dir
    meta, other = cpu_images["pytorch"], cpu_images["jax"]
    check_site_then_rerun(
        {**os.environ, **env, "SUITE_IMAGE_DIR": str(folder), "OMP_NUM_THREADS": "1"}, tmp_path, "podman",
        meta["image_sha256"], shutil.which("podman"), {"SUITE_IMAGE": other["image"]},
        f"drift: image: sha256 {meta['image_sha256'][:12]} in the record, {other['image_sha256'][:12]} here "
        f"({other['image']}, runtime podman)")
