"""RUNTIME=apptainer and RUNTIME=docker: the argv and environment they give a case, their refusals
before launch, and the provenance they put into the record (Docker's through a stand-in engine)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster
from suite.execution.plan import Launch, StackRequest
from suite.execution.request import RunRequest, recorded
from suite.inputs import host_gpus
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import Host, World
from suite.launchers import tfdist
from suite.records.schema import validate
from suite.records.write import RunContext, build_record, new_run_id, utc_now
from suite.runtimes import apptainer, docker, local
from suite.runtimes.apptainer import definition, sif
from suite.stacks import images
from suite.stacks.recipes import Stack, load_stack

STACK = load_stack("tensorflow")
SHA = "5e" * 32


def executable(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def host(tmp_path, monkeypatch):
    """This host with an `apptainer` on PATH, an image folder, and no GPU unless asked for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir, "apptainer", "exit 0")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path / "images"))
    for name in ("SUITE_IMAGE", "SUITE_APPTAINER"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "images").mkdir()
    return tmp_path


def want(**given) -> StackRequest:
    """The tensorflow stack as a run asks for it, on a host with no GPU unless given."""
    return StackRequest(STACK, **{"gpus": 0, **given})


def built_image(folder: Path, flavour: str = "cpu") -> Path:
    """An image file and the metadata `make containers` writes beside it."""
    image = folder / "images" / f"tensorflow-{flavour}.sif"
    image.write_bytes(b"#!/usr/bin/env run-singularity\n\0" + sif.SIF_MAGIC + b"\0" * 64)  # a SIF's header
    fl = images.load_flavour(STACK, flavour)
    images.write_image_meta(apptainer.meta_path(image), fl, str(image), SHA, "apptainer",
                                {"built": True}, {"tensorflow": "2.21.0"}, {"kind": "pinned", "ref": fl.base})
    return image


def test_apptainer_runs_each_process_of_the_case_in_the_image(host):
    image = built_image(host)
    env = apptainer.prepare(want(binds=(str(host),)), log=lambda m: None)
    tool = str(host / "bin" / "apptainer")
    assert env.prefix == (tool, "exec", "--bind", f"{paths.ROOT},{host}", str(image))
    assert env.argv("python", "train.py") == [*env.prefix, "/opt/stack/bin/python", "train.py"]
    assert env.env == {"PYTHONPATH": str(paths.ROOT)} and env.facts == {"built": True}

    world = World((Host("127.0.0.1", 1), Host("127.0.0.2", 1)), "hf")
    plan = tfdist.plan(Launch("/c/train.py", ["--epochs", "2"], world, env, str(host / "run"), "/data"))
    for process in plan.processes:  # one container per process, started where the scheduler runs it
        assert process.argv[:5] == list(env.prefix) and process.argv[5:7] == ["/opt/stack/bin/python", "/c/train.py"]
        assert process.env["PYTHONPATH"] == str(paths.ROOT) and "TF_CONFIG" in process.env


def test_apptainer_asks_for_gpus_and_the_cuda_image_on_a_gpu_host(host, monkeypatch):
    image = built_image(host, "cuda")
    env = apptainer.prepare(want(gpus=4), log=lambda m: None)
    assert env.prefix[1:3] == ("exec", "--nv") and env.prefix[-1] == str(image)
    assert env.provenance["image_flavour"] == "cuda"


def site(tmp_path: Path, **table) -> Cluster:
    """A cluster profile whose [apptainer] table is `table`, as load_cluster makes it."""
    return Cluster("site", tmp_path / "site.toml", runtime="apptainer", plugins={"apptainer": table})


def test_apptainer_takes_binds_and_the_gpu_option_from_the_profile(host):
    image = built_image(host, "cuda")
    scratch = host / "scratch"
    scratch.mkdir()
    cluster = site(host, binds=[str(scratch), f"{scratch}:/scratch"], gpus="rocm")
    env = apptainer.prepare(want(gpus=4, profile=cluster), log=lambda m: None)
    assert env.prefix == (str(host / "bin" / "apptainer"), "exec", "--rocm",
                          "--bind", f"{paths.ROOT},{scratch},{scratch}:/scratch", str(image))
    no_gpu_option = apptainer.prepare(want(gpus=4, profile=site(host, gpus="none")), log=lambda m: None)
    assert no_gpu_option.prefix[1:3] == ("exec", "--bind")
    on_a_cpu_host = apptainer.prepare(want(flavour="cuda", profile=cluster), log=lambda m: None)
    assert "--rocm" not in on_a_cpu_host.prefix  # no GPU here: nothing to pass through


@pytest.mark.parametrize("table, refusal", [
    ({"binds": ["/nonexistent/scratch"]}, r"^\[apptainer\] binds: /nonexistent/scratch does not exist on this host"),
    ({"gpus": "cuda"}, r"^\[apptainer\] gpus must be one of nv, rocm, none, got 'cuda'$"),
])
def test_apptainer_refuses_a_profile_it_cannot_follow(host, table, refusal):
    built_image(host)
    with pytest.raises(UsageError, match=refusal):
        apptainer.prepare(want(profile=site(host, **table)), log=lambda m: None)


def test_gpus_are_counted_from_nvidia_smi(host, monkeypatch):
    executable(host / "bin", "nvidia-smi",
               'echo "GPU 0: NVIDIA H100 (UUID: GPU-1)"; echo "GPU 1: NVIDIA H100 (UUID: GPU-2)"')
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert host_gpus.host_gpus() == 2
    assert host_gpus.pick_flavour() == "cuda"
    assert host_gpus.pick_flavour(None, 0) == "cpu" and host_gpus.pick_flavour("cpu") == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert host_gpus.host_gpus() == 1


def test_apptainer_provenance_names_the_image_and_its_digest(host):
    image = built_image(host)
    env = apptainer.prepare(want(), log=lambda m: None)
    prov = env.provenance
    assert (prov["runtime"], prov["image"], prov["image_sha256"]) == ("apptainer", str(image), SHA)
    assert prov["stack_lock_sha256"] == STACK.lock_sha256 and prov["stack_packages"] == {"tensorflow": "2.21.0"}
    record = failed_record(prov)
    validate(record)
    assert record["provenance"]["image_sha256"] == SHA and record["provenance"]["runtime"] == "apptainer"


def test_apptainer_refuses_a_missing_image_naming_path_and_make_target(host):
    with pytest.raises(UsageError, match=r"no cpu image of stack tensorflow at .*tensorflow-cpu\.sif: build it "
                                         r"with `make containers STACK=tensorflow FLAVOUR=cpu`"):
        apptainer.prepare(want(), log=lambda m: None)


def test_apptainer_refuses_without_apptainer(host, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="needs `apptainer`"):
        apptainer.prepare(want(), log=lambda m: None)


def test_apptainer_refuses_an_image_of_another_lock_unless_allowed(host, monkeypatch):
    image = built_image(host)
    meta = json.loads(apptainer.meta_path(image).read_text())
    apptainer.meta_path(image).write_text(json.dumps({**meta, "lock_sha256": "00" * 32}))
    with pytest.raises(UsageError,
                       match=r"built from another lock than the checkout's \(image 000000000000, checkout "):
        apptainer.prepare(want(), log=lambda m: None)
    monkeypatch.setenv("SUITE_ALLOW_STALE_IMAGE", "1")
    said = []
    env = apptainer.prepare(want(), log=said.append)
    assert any("built from another lock" in m for m in said)
    assert env.provenance["stack_lock_sha256"] == "00" * 32  # the record states the image's lock


def test_run_with_missing_image_stops_in_one_line_before_launch(tmp_path):
    env = {**os.environ, "SUITE_IMAGE_DIR": str(tmp_path), "SUITE_APPTAINER": "/bin/true"}
    result = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-synthetic", "--runtime",
                             "apptainer", "--flavour", "cpu", "--gpus-per-node", "1",
                             "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")],
                            cwd=paths.ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: no cpu image of stack pytorch-horovod") and "make containers" in line
    assert not any((tmp_path / "runs").iterdir()) and not (tmp_path / "results").exists()  # nothing ran


class FakeEngine:
    """A Docker engine that has the images given (ref -> labels) and runs the script that reads the stack's
    facts, packages and the image's Debian packages (docker.read_from_image)."""

    def __init__(self, known: dict):
        self.known, self.images, self.containers = known, self, self

    def get(self, ref):
        import docker as sdk

        if ref not in self.known:
            raise sdk.errors.ImageNotFound(ref)
        return type("Image", (), {"labels": self.known[ref], "id": f"sha256:{SHA}"})

    def run(self, ref, argv, remove):
        return b'{"built": true}\x1e[{"name": "TensorFlow", "version": "2.21.0"}]\x1epython3=3.11.2\n\x1e'


def test_docker_runs_programs_through_the_sdk_shim_and_records_the_images_labels(monkeypatch):
    fl = images.load_flavour(STACK, "cpu")
    labels = images.labels(fl, "hpc-dl-bench-base:debian-bookworm-0123")
    labels |= {"org.hpc-dl-bench.base.kind": "debian", "org.hpc-dl-bench.base.release_date": "Sat, 10 Jan 2026",
               "org.hpc-dl-bench.base.spec": "ab12"}
    engine = FakeEngine({"hpc-dl-bench-tensorflow:cpu-x": labels,
                         "pinned": images.labels(fl, "python:3.11@sha256:x")})
    monkeypatch.setattr(docker, "engine_problem", lambda: None)
    monkeypatch.setattr(docker, "client", lambda timeout=60: engine)
    monkeypatch.setenv("SUITE_IMAGE", "hpc-dl-bench-tensorflow:cpu-x")
    said = []
    env = docker.prepare(want(gpus=2, flavour="cpu", binds=("/nonexistent",)), said.append)
    argv = env.argv("python", "t.py")
    assert argv[:6] == [sys.executable, "-m", "suite.runtimes.docker", "--image", "hpc-dl-bench-tensorflow:cpu-x",
                        "--bind"]
    assert argv[6].split(",")[0] == str(paths.ROOT) and argv[7] == "--session"  # and the runs and data folders
    assert argv[9:] == ["--gpus", "--", "/opt/stack/bin/python", "t.py"]
    assert env.facts == {"built": True} and env.env == {"PYTHONPATH": str(paths.ROOT)}
    prov = env.provenance
    assert (prov["runtime"], prov["image"], prov["image_sha256"]) == ("docker", "hpc-dl-bench-tensorflow:cpu-x", SHA)
    assert prov["image_base"] == {"kind": "debian", "ref": "hpc-dl-bench-base:debian-bookworm-0123",
                                  "release_date": "Sat, 10 Jan 2026"}
    assert prov["stack_packages"] == {"tensorflow": "2.21.0"} and prov["image_system_packages"] == {"python3": "3.11.2"}
    assert said == [f"stack tensorflow: docker image hpc-dl-bench-tensorflow:cpu-x (cpu, sha256:{SHA[:12]})"]
    validate(failed_record(prov))
    monkeypatch.setenv("SUITE_IMAGE", "pinned")
    pinned = docker.prepare(want(gpus=0, flavour="cpu"), lambda m: None)
    assert pinned.provenance["image_base"] == {"kind": "pinned", "ref": "python:3.11@sha256:x"}
    assert "--gpus" not in pinned.prefix
    monkeypatch.setenv("SUITE_IMAGE", "never-built")
    with pytest.raises(UsageError, match=r"^no Docker image never-built: build it with `make containers "
                                         r"STACK=tensorflow FLAVOUR=cpu TOOL=docker` \(or set SUITE_IMAGE\)$"):
        docker.prepare(want(gpus=0, flavour="cpu"), lambda m: None)


def test_docker_container_options():
    environ = {"SUITE_RUN_DIR": "/r", "TF_CONFIG": "{}", "PYTHONPATH": "/suite", "HOME": "/root", "SECRET": "x"}
    opts = docker.run_options("img", ["/opt/stack/bin/python", "t.py"], ["/suite", "/r"], True, environ, "/r", "s1")
    assert opts["labels"] == {"org.hpc-dl-bench.session": "s1", "org.hpc-dl-bench.client_pid": str(os.getpid())}
    assert opts["command"] == ["/opt/stack/bin/python", "t.py"] and opts["working_dir"] == "/r"
    assert opts["environment"] == {"SUITE_RUN_DIR": "/r", "TF_CONFIG": "{}", "PYTHONPATH": "/suite", "HOME": "/tmp"}
    assert opts["volumes"] == {"/suite": {"bind": "/suite", "mode": "rw"}, "/r": {"bind": "/r", "mode": "rw"}}
    assert (opts["network_mode"], opts["ipc_mode"]) == ("host", "host")
    [gpus] = opts["device_requests"]
    assert gpus["Count"] == -1 and gpus["Capabilities"] == [["gpu"]]
    assert docker.run_options("img", ["x"], [], False, {}, "/")["device_requests"] is None


def test_docker_refuses_without_an_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(UsageError, match="RUNTIME=docker needs a Docker engine on this host"):
        docker.prepare(want(), log=lambda m: None)


def test_local_runtime_records_runtime_and_no_image(tmp_path, monkeypatch):
    monkeypatch.setenv("SUITE_STACK_HOME", str(tmp_path / "home"))
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "requirements.lock").write_text("# no packages\n")
    prov = local.prepare(StackRequest(Stack("toy", folder)), log=lambda m: None).provenance
    assert (prov["runtime"], prov["image"], prov["image_sha256"]) == ("local", None, None)
    assert "pip" in prov["stack_packages"]  # pip list of the environment


def failed_record(provenance: dict) -> dict:
    case = load_case("pytorch-synthetic")
    world = World((Host("localhost", 1),), "hostfiles/localhost")
    ctx = RunContext(new_run_id(case.name, 1, 1), case, {}, world, provenance["runtime"], "local", ["suite"], utc_now(),
                     request=recorded(RunRequest()))
    return build_record(ctx, [], provenance, {}, "stopped for the test")


def test_apptainer_refuses_a_sif_cut_short_or_not_a_sif_or_unreadable(host):
    image = built_image(host)
    meta = json.loads(apptainer.meta_path(image).read_text())
    hint = "make containers STACK=tensorflow FLAVOUR=cpu"
    apptainer.check_sif(image, {**meta, "image_bytes": image.stat().st_size}, hint)  # as built: fine
    with pytest.raises(UsageError, match=rf"has {image.stat().st_size} bytes, not the 999999 it was built with"):
        apptainer.check_sif(image, {**meta, "image_bytes": 999999}, hint)
    image.write_bytes(b"\0" * 100)
    with pytest.raises(UsageError, match=r"is not a SIF image \(no SIF header\): rebuild it with `make containers"):
        apptainer.check_sif(image, meta, hint)
    image.unlink()
    image.mkdir()
    with pytest.raises(UsageError, match=r"cannot read the image .* \(Is a directory\)"):
        apptainer.check_sif(image, meta, hint)


def test_apptainer_refuses_a_bind_of_a_missing_folder_but_not_the_default_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "default-data"))
    apptainer.check_binds([str(tmp_path), str(tmp_path / "default-data")])
    with pytest.raises(UsageError, match=rf"cannot bind {tmp_path}/gone into the image: no such folder"):
        apptainer.check_binds([str(tmp_path), str(tmp_path / "gone")])


def test_apptainer_build_definition_fills_in_base_and_wheels_and_traces_the_test():
    fl = images.load_flavour(load_stack("pytorch"), "cpu")
    text = apptainer.recipe(fl).text
    built = definition.build_definition(text, Path("/images/bases/debian.sif"), "http://127.0.0.1:1/")
    lines = built.splitlines()
    assert lines[:2] == ["Bootstrap: localimage", "From: /images/bases/debian.sif"]
    assert lines[lines.index("%post") + 1] == '    export WHEELS="http://127.0.0.1:1/"'
    assert lines[lines.index("%test") + 1] == "    set -x"
    assert definition.build_definition(text, None, "").splitlines()[:2] == text.splitlines()[:2]


def test_a_failed_apptainer_build_names_the_section_and_line_of_the_definition():
    fl = images.load_flavour(load_stack("pytorch"), "cpu")
    rendered = apptainer.recipe(fl)
    number = next(i for i, line in enumerate(rendered.text.splitlines(), 1) if "pip install" in line)
    pip = rendered.text.splitlines()[number - 1].strip()
    output = ["INFO:    Running post scriptlet", "+ set -eu", f"+ {pip.replace(chr(39), '')}",
              "ERROR: No matching distribution found for torch",
              "FATAL:   While performing build: while running engine: while running %post section: exit status 1"]
    said = definition.build_failure(rendered, output, 255, Path("/x/pytorch-cpu.sif.build.log"))
    assert said.startswith(f"apptainer build failed in %post of containers/pytorch/cpu.def line {number}: `")
    assert "(While performing build: while running engine: while running %post section: exit status 1)" in said
    assert said.endswith("the build's output: /x/pytorch-cpu.sif.build.log")
