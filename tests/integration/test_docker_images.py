"""The stacks' cpu images, built for real in a Docker engine on a Debian base made here, and the cases
run inside them (RUNTIME=docker): what is installed in each image is exactly its lock, every process
of a case runs in a container of the image whose ID the record states, and no container of a run
outlives it. The engine and the images are tests/support/docker_fixtures.py's."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import records_in, tiny
from support.cluster_fixtures import LOOPBACK_HOSTS
from support.docker_fixtures import CPU_STACKS

from suite.records.schema import validate
from suite.runtimes import apptainer
from suite.stacks import images, wheelhouse
from suite.stacks.locks import lock_pins
from suite.stacks.recipes import load_stack

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = ("--nodes", "2", "--hostfile", str(ROOT / "hostfiles" / "loopback"))


def client():
    import docker

    return docker.from_env(timeout=120)


def in_image(image: str, *argv: str, **options) -> str:
    return client().containers.run(image, list(argv), remove=True, **options).decode()


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def session_containers() -> list:
    return client().containers.list(all=True, filters={"label": "org.hpc-dl-bench.session"})


@pytest.mark.parametrize("stack", CPU_STACKS)
def test_image_holds_exactly_its_locks(cpu_images, stack):
    meta = cpu_images[stack]
    assert client().images.get(meta["image"]).id == f"sha256:{meta['image_sha256']}"
    expected = {}
    for lock in load_stack(stack).dir.glob("*.lock"):
        expected.update({normalise(n): v for n, v in lock_pins(lock).items()})
    frozen = in_image(meta["image"], f"{images.PREFIX}/bin/python", "-m", "pip", "freeze", "--all")
    installed = {}
    for line in frozen.splitlines():  # name==version, or `name @ file:///...` for what post-install built
        name, pinned, version = line.partition("==")
        if not pinned:
            name = line.split(" @ ")[0]
            version = meta["packages"][name.lower()]  # pip list's version of it, read at build time
        installed[normalise(name)] = version
    installed.pop("pip")  # the venv's own, as in the local stack
    if "setuptools" not in expected:
        installed.pop("setuptools", None)  # Python 3.11's venv seeds it
    assert installed == expected
    lock = load_stack(stack).dir / "requirements.lock"
    assert meta["packages"] and meta["lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()


def test_images_rest_on_the_debian_base_made_here(cpu_images):
    bases = {json.dumps(meta["base"], sort_keys=True) for meta in cpu_images.values()}
    assert len(bases) == 1  # one base for every stack
    base = cpu_images["pytorch"]["base"]
    assert base["kind"] == "debian" and base["suite"] == "bookworm"
    assert re.fullmatch(r"[0-9a-f]{64}", base["tar_sha256"])
    assert re.search(r"\d{4} \d\d:\d\d:\d\d", base["release_date"])  # the mirror's Release date
    assert base["packages"]["python3"].startswith("3.11") and "python3-venv" in base["packages"]
    labels = client().images.get(cpu_images["pytorch"]["image"]).labels
    assert labels["org.hpc-dl-bench.base_ref"] == base["ref"]
    assert labels["org.hpc-dl-bench.base.tar_sha256"] == base["tar_sha256"]
    # What the build wrote is not in any layer: no pip settings, no CA bundle other than Debian's.
    found = in_image(cpu_images["pytorch"]["image"], "sh", "-c",
                     "ls /etc/pip.conf /etc/xdg/pip 2>&1; env | grep ^PIP_ || true")
    assert "No such file" in found and "PIP_" not in found


def record_of(suite_cli, result) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok", record["reason"]
    assert session_containers() == []
    return record


def assert_ran_in(record: dict, meta: dict, devices: int) -> None:
    prov = record["provenance"]
    assert (prov["runtime"], prov["image"], prov["image_sha256"]) == ("docker", meta["image"], meta["image_sha256"])
    # The record's lock is the checkout's lock file (hashed here, not taken from the image's labels).
    lock = load_stack(meta["stack"]).dir / "requirements.lock"
    assert prov["stack_lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest() and prov["stack_flavour"] == "cpu"
    assert prov["image_base"]["kind"] == "debian" and prov["image_base"]["tar_sha256"] == meta["base"]["tar_sha256"]
    assert prov["image_system_packages"]["python3"].startswith("3.11")
    assert record["world"]["devices"] == devices
    assert record["metrics"]["throughput"]["mean"] > 0
    for process in record["repetitions"][0]["processes"]:
        assert process["argv"][:3] == [sys.executable, "-m", "suite.runtimes.docker"], process["argv"]


def test_horovod_workers_train_in_the_image(cpu_images, suite_cli):
    result = suite_cli("run", "--case", "pytorch-synthetic", "--runtime", "docker", "--gpus-per-node", "2",
                       case_args=tiny("pytorch-synthetic"))
    record = record_of(suite_cli, result)
    assert_ran_in(record, cpu_images["pytorch-horovod"], 2)
    assert record["execution"]["launcher"] == "horovod"
    assert record["provenance"]["versions"]["horovod"] == "0.28.1"


def test_ddp_workers_train_in_the_image(cpu_images, suite_cli):
    result = suite_cli("run", "--case", "pytorch-ddp", "--runtime", "docker", "--gpus-per-node", "2",
                       case_args=tiny("pytorch-ddp"))
    assert_ran_in(record_of(suite_cli, result), cpu_images["pytorch"], 2)


def test_gpt_trains_sharded_in_the_image(cpu_images, suite_cli):
    result = suite_cli("run", "--case", "pytorch-gpt", "--runtime", "docker", "--gpus-per-node", "2",
                       case_args=tiny("pytorch-gpt", parallel="fsdp"))
    record = record_of(suite_cli, result)
    assert_ran_in(record, cpu_images["pytorch"], 2)
    reported = record["config"]["reported_by_case"]
    assert reported["parallel"] == "fsdp" and reported["fsdp"]["sharded_modules"] == 3
    assert record["metrics"]["throughput"]["unit"] == "tokens/s"


def test_jax_gpt_trains_sharded_in_the_image(cpu_images, suite_cli):
    """jax.distributed between two containers (host network): the coordinator and Gloo on this host."""
    result = suite_cli("run", "--case", "jax-gpt", "--runtime", "docker", "--gpus-per-node", "2", "--no-precheck",
                       case_args=tiny("jax-gpt", parallel="fsdp"))
    record = record_of(suite_cli, result)
    assert_ran_in(record, cpu_images["jax"], 2)
    reported = record["config"]["reported_by_case"]
    assert reported["parallel"] == "fsdp" and reported["processes"] == 2
    assert record["provenance"]["versions"]["jax"] == cpu_images["jax"]["packages"]["jax"]


@pytest.fixture(scope="module")
def cifar_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("cifar")
    made = subprocess.run([sys.executable, "-m", "suite", "data", "--case", "tf-cifar", "--synthetic", "--data-dir",
                           str(data), "--", "--train-per-batch", "16", "--test-images", "16"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr[-2000:]
    return data


def test_multi_worker_mirrored_strategy_in_the_images(cpu_images, suite_cli, cifar_data):
    """The CIFAR files read in the containers from the data folder they mount (the model: ResNet-18, the smallest)."""
    result = suite_cli("run", "--case", "tf-cifar", "--runtime", "docker", *LOOPBACK, "--no-precheck", "--data-dir",
                       str(cifar_data), case_args=tiny("tf-cifar", model="resnet18"))
    record = record_of(suite_cli, result)
    assert_ran_in(record, cpu_images["tensorflow"], 2)
    assert record["config"]["reported_by_case"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert record["repetitions"][0]["exit_codes"] == {"worker-0": 0, "worker-1": 0}


def test_each_host_starts_its_containers_over_ssh(cpu_images, suite_cli, loopback_sshd):
    """The ssh scheduler starts the docker runtime's client program on each host, which runs the
    worker in that host's engine (here both hosts are this machine, and so is the engine)."""
    before = loopback_sshd.sessions()
    result = suite_cli("run", "--case", "pytorch-ddp", "--cluster", "loopback-ssh", "--runtime", "docker",
                       "--nodes", "2", case_args=tiny("pytorch-ddp"))
    record = record_of(suite_cli, result)
    assert_ran_in(record, cpu_images["pytorch"], 2)
    assert record["execution"]["scheduler"] == "ssh" and record["world"]["hosts"] == list(LOOPBACK_HOSTS)
    assert all(count > before[host] for host, count in loopback_sshd.sessions().items())


def test_ps_lite_scheduler_servers_and_workers_each_in_a_container(cpu_images, suite_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # five MXNet processes on this machine's cores
    data = tmp_path / "data"
    made = suite_cli("data", "--case", "mxnet-imagenet", "--synthetic", "--data-dir", str(data), case_args=(
        "--classes", "3", "--train-per-class", "8", "--val-per-class", "2", "--num-thread", "2"))
    assert made.returncode == 0, made.stderr[-2000:]
    result = suite_cli("run", "--case", "mxnet-imagenet", "--runtime", "docker", *LOOPBACK, "--no-precheck",
                       "--data-dir", str(data), case_args=tiny("mxnet-imagenet"))
    record = record_of(suite_cli, result)
    assert_ran_in(record, cpu_images["mxnet"], 2)
    assert record["repetitions"][0]["exit_codes"] == {"worker-0": 0, "worker-1": 0, "server-0": 0, "server-1": 0,
                                                       "scheduler": 0}
    assert record["config"]["reported_by_case"]["kvstore"] == "dist_sync"


# Inside a container: SIGKILL every process whose environment says RANK=1.
KILL_RANK_1 = ('for p in /proc/[0-9]*; do if tr "\\0" "\\n" < "$p/environ" 2>/dev/null | grep -qx RANK=1; then '
               'kill -9 "${p#/proc/}" && echo "killed ${p#/proc/}"; fi; done')


@pytest.mark.parametrize("fault", ["rank 1 killed in its container", "the runner interrupted"])
def test_a_fault_ends_the_job_within_60_s_and_no_container_survives(cpu_images, tmp_path, fault):
    """Rank 1 killed inside its container mid-run (as the kernel's OOM killer would), or Ctrl-C to
    the runner: the job ends within 60 s with a failed record, and no container of the run is left."""
    from support.faults import failed_record_after, start_run, wait_for_ranks

    runner = start_run(tmp_path, "--case", "pytorch-ddp", "--runtime", "docker", "--gpus-per-node", "2",
                       case_args=tiny("pytorch-ddp", num_iters=1000))
    try:
        pids = wait_for_ranks(tmp_path, 2)  # as the ranks see them: pids of the container's namespace
        [container] = session_containers()  # torchrun and both ranks
        ranks_alive = container.exec_run(["sh", "-c", "kill -0 " + " ".join(map(str, pids.values()))]).exit_code == 0
        assert container.status == "running" and ranks_alive  # positive control
        if fault == "the runner interrupted":
            runner.send_signal(signal.SIGINT)
        else:
            assert b"killed" in container.exec_run(["sh", "-c", KILL_RANK_1]).output
        record = failed_record_after(runner, tmp_path, leftovers=session_containers)
    finally:  # a failed assertion above leaves nothing for the next test to find
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        for container in session_containers():
            container.remove(force=True)
    if fault == "the runner interrupted":
        assert record["reason"].startswith("interrupted"), record["reason"]
    else:
        # the rank wrote nothing (SIGKILL): torchrun's root cause names it, never its ChildFailedError line
        assert ("torchrun-0 on localhost exited with 1; first error: 'rank 1 (local_rank: 1): Signal 9 (SIGKILL)"
                in record["reason"]), record["reason"]


def test_cleanup_removes_a_container_whose_client_was_killed(cpu_images):
    """SIGKILL of the program that started a container leaves the container running; the runtime's
    cleanup, which the runner calls after every repetition, removes it by the run's session label."""
    from suite.execution.plan import StackEnv
    from suite.runtimes import docker as docker_runtime

    session = f"test{time.monotonic_ns()}"
    shim = subprocess.Popen([sys.executable, "-m", "suite.runtimes.docker", "--image", cpu_images["pytorch"]["image"],
                             "--bind", "", "--session", session, "--", "sleep", "300"], cwd=ROOT)
    label = {"label": f"org.hpc-dl-bench.session={session}"}
    deadline = time.monotonic() + 60
    while not client().containers.list(filters=label) and time.monotonic() < deadline:
        time.sleep(0.3)
    shim.send_signal(signal.SIGKILL)
    shim.wait()
    assert [c.status for c in client().containers.list(all=True, filters=label)] == ["running"]
    said = []
    docker_runtime.cleanup(StackEnv("docker", "/opt/stack/bin", prefix=("python", "--session", session, "--")),
                           said.append)
    assert client().containers.list(all=True, filters=label) == []
    assert said == ["docker: removed 1 container(s) that outlived their process"]


# One stack's definition (each %post installs its whole lock again: 30 s for mxnet, 85 s for pytorch
# here), rendered by the same code as the others'; pytorch-horovod's %post is the same post-install.sh
# run that its Dockerfile's RUN lines make for the image tested above.
@pytest.mark.parametrize("stack, says", [("mxnet", "mxnet 1.9.1")])
def test_definition_post_and_test_sections_run_in_the_base(cpu_images, tmp_path, stack, says):
    """(tests/integration/test_apptainer.py builds the pytorch definition with Apptainer itself.) An Apptainer
    build runs the definition's %post in a root filesystem
    of the base with %files copied in, then %test with %environment sourced. The same, in a container
    of the Debian base: the sections as the definition writes them, not the Dockerfile's copy."""
    fl = images.load_flavour(load_stack(stack), "cpu")
    sections = definition_sections(apptainer.recipe(fl).path.read_text())
    environment = tmp_path / "environment"
    environment.write_text(sections["environment"].replace("$PATH", "/usr/local/bin:/usr/bin:/bin"))
    script = "\n".join([sections["post"], f". {environment}", sections["test"]])
    with wheelhouse.served(Path(images.build_dir()) / "wheels") as wheels:
        out = in_image(cpu_images[stack]["base"]["ref"], "bash", "-c", script, network_mode="host",
                       environment={"WHEELS": wheels},
                       volumes={str(fl.stack.dir): {"bind": images.RECIPE, "mode": "ro"},
                                str(environment): {"bind": str(environment), "mode": "ro"}})
    assert says in out


def definition_sections(text: str) -> dict[str, str]:
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("%"):
            current = line[1:].split()[0]
            sections[current] = ""
        elif current:
            sections[current] += line.strip() + "\n"
    return sections


def test_a_missing_image_is_refused_naming_the_build_command(docker_engine, suite_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path))  # no metadata: the tag the build would give
    monkeypatch.setenv("SUITE_IMAGE", "hpc-dl-bench-pytorch:never-built")
    result = suite_cli("run", "--case", "pytorch-ddp", "--runtime", "docker", case_args=tiny("pytorch-ddp"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "no Docker image hpc-dl-bench-pytorch:never-built: build it with `make containers STACK=pytorch FLAVOUR=cpu "
        "TOOL=docker` (or set SUITE_IMAGE)")
    assert not suite_cli.runs.exists() or not any(suite_cli.runs.iterdir())


def test_a_pinned_base_that_cannot_be_pulled_names_the_debian_route(docker_engine):
    build = subprocess.run([sys.executable, "-m", "suite", "containers", "build", "--tool", "docker", "--stack",
                            "pytorch", "--flavour", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert build.returncode == 2
    [line] = build.stderr.strip().splitlines()
    assert line.startswith("error: cannot pull the pinned base python:3.11-slim-bookworm@sha256:") and line.endswith(
        "build on a Debian base made here instead: make containers BASE=debian")


def test_an_image_of_another_lock_is_refused(cpu_images, suite_cli, monkeypatch):
    dockerfile = (f"FROM {cpu_images['pytorch']['image']}\n"
                  f'LABEL org.hpc-dl-bench.lock_sha256="{"0" * 64}"\n')
    import io

    client().images.build(fileobj=io.BytesIO(dockerfile.encode()), tag="hpc-dl-bench-pytorch:other-lock", rm=True)
    monkeypatch.setenv("SUITE_IMAGE", "hpc-dl-bench-pytorch:other-lock")
    result = suite_cli("run", "--case", "pytorch-ddp", "--runtime", "docker", case_args=tiny("pytorch-ddp"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: the cpu image of pytorch was built from another lock than the checkout's (image 000000000000, ")
    assert not suite_cli.results.exists()
