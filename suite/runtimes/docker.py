"""Runs a stack from its Docker image (containers/<stack>/<flavour>.Dockerfile, built by `make
containers TOOL=docker`) through the Docker SDK.

The suite's schedulers start argv lists, so every program of the stack becomes
`python -m suite.runtimes.docker --image REF --bind DIRS [--gpus] -- PROGRAM ARGS`: this module, run
as a program on the host, starts the container with the SDK (host network and IPC, the bound folders
at their own paths, the caller's uid, all GPUs when the host has them), streams its output, stops it
when it is signalled and exits with its status. The image is $SUITE_IMAGE, or the tag that `make
containers` recorded in <image dir>/<stack>-<flavour>.docker.json, or the tag the build would give."""

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

from suite import containers, paths
from suite.containers import bind_list
from suite.errors import UsageError
from suite.plan import StackEnv
from suite.procenv import forwarded_env
from suite.stacks import Stack


def prepare(stack: Stack, log=print, binds: Iterable[Path | str] = (), image_dir: Path | None = None) -> StackEnv:
    problem = containers.docker_engine_problem()
    if problem:
        raise UsageError(f"RUNTIME=docker needs a Docker engine on this host: {problem}")
    import docker

    client = docker.from_env()
    gpus = containers.host_gpus()
    flavour = containers.pick_flavour(gpus)
    ref = image_ref(stack, flavour, image_dir)
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise UsageError(f"no Docker image {ref}: build it with `make containers STACK={stack.name} "
                         f"FLAVOUR={flavour} TOOL=docker` (or set SUITE_IMAGE)") from None
    labels = image.labels or {}
    if labels.get(f"{containers.LABEL}.stack") != stack.name:
        raise UsageError(f"image {ref} is not an image of stack {stack.name} (label {containers.LABEL}.stack)")
    facts, packages = read_from_image(client, ref)
    log(f"stack {stack.name}: docker image {ref} ({image.id[:19]})")
    return stack_env(ref, image.id, labels, facts, packages, gpus > 0, bind_list(binds))


def image_ref(stack: Stack, flavour: str, image_dir: Path | None = None) -> str:
    if os.environ.get("SUITE_IMAGE"):
        return os.environ["SUITE_IMAGE"]
    meta = (Path(image_dir) if image_dir else containers.build_dir()) / f"{stack.name}-{flavour}.docker.json"
    try:
        return json.loads(meta.read_text())["image"]
    except (OSError, ValueError, KeyError):
        return containers.docker_tag(containers.load_flavour(stack, flavour))


def read_from_image(client, ref: str) -> tuple[dict, dict]:
    out = client.containers.run(ref, ["cat", containers.FACTS, containers.PACKAGES], remove=True).decode()
    facts_text, _, packages_text = out.partition("\n")  # the facts file is one line of JSON
    return json.loads(facts_text or "{}"), containers.packages_from_pip_list(packages_text.strip())


def stack_env(ref: str, image_id: str, labels: dict, facts: dict, packages: dict, gpus: bool,
              binds: list[str]) -> StackEnv:
    prefix = (sys.executable, "-m", "suite.runtimes.docker", "--image", ref, "--bind", ",".join(binds),
              *(["--gpus"] if gpus else []), "--")
    return StackEnv(
        runtime="docker",
        bin_dir=f"{containers.PREFIX}/bin",
        prefix=prefix,
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=facts,
        provenance={
            "stack": labels.get(f"{containers.LABEL}.stack"),
            "stack_lock_sha256": labels.get(f"{containers.LABEL}.lock_sha256"),
            "stack_recipe_sha256": labels.get(f"{containers.LABEL}.recipe_sha256"),
            "stack_location": f"{ref}:{containers.PREFIX}",
            "stack_packages": packages,
            "runtime": "docker",
            "image": ref,
            "image_sha256": image_id.removeprefix("sha256:"),
            "image_flavour": labels.get(f"{containers.LABEL}.flavour"),
        },
    )


# ---- the program the prefix runs on each host ---------------------------------------------------

def doctor_lines(cluster, stacks: list[str]) -> list[str]:
    problem = containers.docker_engine_problem()
    return [f"missing: Docker engine ({problem})" if problem else "ok: Docker engine"]


def container_env(environ: dict) -> dict:
    """What launchers and cases set (suite.procenv's policy), not the host's whole environment."""
    return {**forwarded_env(environ), "HOME": "/tmp"}  # the caller's uid has no home in the image


def run_options(image: str, argv: list[str], binds: list[str], gpus: bool, environ: dict, cwd: str) -> dict:
    """Keyword arguments of docker's containers.run for one program of the stack."""
    from docker.types import DeviceRequest

    return {
        "image": image,
        "command": argv,
        "detach": True,
        "environment": container_env(environ),
        "working_dir": cwd,
        "volumes": {b: {"bind": b, "mode": "rw"} for b in binds if b},
        "network_mode": "host",  # ranks on several hosts reach each other as on the host
        "ipc_mode": "host",  # shared memory for NCCL, Gloo and data loaders
        "user": f"{os.getuid()}:{os.getgid()}",  # files in the run directory stay the caller's
        "init": True,
        "device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.runtimes.docker",
                                     description="Run one program of a stack in its Docker image.")
    parser.add_argument("--image", required=True)
    parser.add_argument("--bind", default="", help="comma-separated folders, bound at their own paths")
    parser.add_argument("--gpus", action="store_true")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program to run")
    import docker

    container = docker.from_env().containers.run(**run_options(args.image, program, args.bind.split(","),
                                                               args.gpus, dict(os.environ), os.getcwd()))

    def stop(signum, frame):
        container.stop(timeout=5)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return container.wait()["StatusCode"]
    finally:
        container.remove(force=True)


def build_image(fl, log=print) -> dict:
    """`docker build` of a flavour's Dockerfile through the SDK, tagged by its lock, with its metadata."""
    import io
    import tarfile

    import docker

    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:  # only what the Dockerfile copies
        tar.add(fl.stack.dir, arcname=f"containers/{fl.stack.name}")
    context.seek(0)
    client = docker.from_env()
    tag = containers.docker_tag(fl)
    log(f"containers: docker build {tag} from {fl.dockerfile.relative_to(paths.ROOT)}")
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True,
                                   dockerfile=f"containers/{fl.stack.name}/{fl.dockerfile.name}")

    def cat(path):
        return client.containers.run(tag, ["cat", path], remove=True).decode()

    meta = containers.write_image_meta(containers.meta_path(tag, fl.stack.name, fl.name), fl, tag,
                                       image.id.removeprefix("sha256:"), "docker", json.loads(cat(containers.FACTS) or "{}"),
                                       containers.packages_from_pip_list(cat(containers.PACKAGES)))
    log(f"containers: {tag} {image.id}")
    return meta


if __name__ == "__main__":
    sys.exit(main())
