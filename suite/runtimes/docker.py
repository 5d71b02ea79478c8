"""Runs a stack from its Docker image through the Docker SDK, and builds that image
(containers/<stack>/<flavour>.Dockerfile, rendered here from container.toml and the locks; `make
containers TOOL=docker`, on the pinned base or on a Debian base made here: suite/stacks/base_images.py).

The suite's schedulers start argv lists, so every program of the stack becomes
`python -m suite.runtimes.docker --image REF --bind DIRS [--gpus] -- PROGRAM ARGS`: this module, run
as a program on the host, starts the container with the SDK (host network and IPC, the bound folders
at their own paths, the caller's uid, all GPUs when the host has them), streams its output, stops it
when it is signalled and exits with its status. The image is $SUITE_IMAGE, or the tag that `make
containers` recorded in <image dir>/<stack>-<flavour>.docker.json, or the tag the build would give."""

import argparse
import io
import json
import os
import signal
import sys
import tarfile
import time
import uuid
from pathlib import Path

from suite.base import paths
from suite.base.env_policy import forwarded_env
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.inputs.host_gpus import pick_flavour
from suite.runtimes._image import Command, ImageRuntime, Run, Where
from suite.stacks import base_images, images
from suite.stacks.base_images import parse_dpkg_list
from suite.stacks.images import Recipe, bind_list
from suite.stacks.recipes import Stack, load_stack

SESSION_LABEL = f"{images.LABEL}.session"
IMAGES = "a Docker engine"  # what it builds images with (make containers TOOL=docker)
BUILD_PREFERENCE = 1  # TOOL=auto tries apptainer first
BASES = ("pinned", "debian")


def engine_problem() -> str | None:
    """None when a Docker engine answers, else why not (one line)."""
    try:
        import docker
    except ImportError:
        return "the `docker` Python package is not installed"
    try:
        docker.from_env(timeout=10).ping()
        return None
    except Exception as exc:  # the SDK raises several kinds; all mean "no engine to use"
        return f"no engine answers ({str(exc).splitlines()[0][:160]})"


def client(timeout: int = 60):
    import docker

    return docker.from_env(timeout=timeout)


class Docker(ImageRuntime):
    name = "docker"
    COUNTS_GPUS = True

    def start(self, want: StackRequest, log):
        """The engine's client; refused where no engine answers."""
        problem = engine_problem()
        if problem:
            raise UsageError(f"RUNTIME=docker needs a Docker engine on this host: {problem}")
        return client()

    def locate(self, want: StackRequest, flavour: str, setup) -> Where:
        return Where(image_ref(want.stack, flavour, want.image_dir), None,
                     f"make containers STACK={want.stack.name} FLAVOUR={flavour} TOOL=docker")

    def read_meta(self, where: Where, engine) -> dict:
        """The image's labels, as the engine has them."""
        import docker

        try:
            image = engine.images.get(where.image)
        except docker.errors.ImageNotFound:
            raise UsageError(f"no Docker image {where.image}: build it with `{where.hint}` "
                             "(or set SUITE_IMAGE)") from None
        return label_meta(image.labels or {}, image.id)

    def command(self, run: Run, log) -> Command:
        facts, packages, system_packages = read_from_image(run.setup, run.image)
        return Command(run_prefix(run.image, run.gpus > 0, bind_list(run.want.binds), uuid.uuid4().hex[:16]),
                       provenance={"image_system_packages": system_packages},
                       meta={"facts": facts, "packages": packages})


prepare = Docker().prepare


def image_ref(stack: Stack, flavour: str, image_dir: Path | None = None) -> str:
    if os.environ.get("SUITE_IMAGE"):
        return os.environ["SUITE_IMAGE"]
    meta = Path(image_dir) / f"{stack.name}-{flavour}.docker.json" if image_dir else meta_path(stack.name, flavour)
    try:
        return json.loads(meta.read_text())["image"]
    except (OSError, ValueError, KeyError):
        return tag(images.load_flavour(stack, flavour))


def tag(fl, base_kind: str = "pinned") -> str:
    suffix = "" if base_kind == "pinned" else f"-{base_kind}"
    return f"hpc-dl-bench-{fl.stack.name}:{fl.name}-{fl.lock_sha256[:12]}{suffix}"


def meta_path(stack: str, flavour: str) -> Path:
    return images.build_dir() / f"{stack}-{flavour}.docker.json"


def read_from_image(engine, ref: str) -> tuple[dict, dict, dict]:
    """The stack's facts, its pip packages and the image's Debian packages, as the image holds them
    (one container; the files are separated by an ASCII record separator)."""
    files = (images.FACTS, images.PACKAGES, images.SYSTEM_PACKAGES)
    script = "; ".join(f"cat {path} 2>/dev/null; printf '\\036'" for path in files)
    facts, packages, system = engine.containers.run(ref, ["sh", "-c", script], remove=True).decode().split("\x1e")[:3]
    return (json.loads(facts.strip() or "{}"), images.packages_from_pip_list(packages.strip()),
            parse_dpkg_list(system))


def label_meta(labels: dict, image_id: str) -> dict:
    """An image's metadata as its labels hold it (images.labels), with the engine's ID as its digest."""
    return {"stack": labels.get(f"{images.LABEL}.stack"), "flavour": labels.get(f"{images.LABEL}.flavour"),
            "lock_sha256": labels.get(f"{images.LABEL}.lock_sha256"),
            "recipe_sha256": labels.get(f"{images.LABEL}.recipe_sha256"),
            "image_sha256": image_id.removeprefix("sha256:"), "base": images.base_from_labels(labels)}


def run_prefix(ref: str, gpus: bool, binds: list[str], session: str) -> tuple[str, ...]:
    """This module run as a program, which starts the container (main below)."""
    return (sys.executable, "-m", "suite.runtimes.docker", "--image", ref, "--bind", ",".join(binds),
            "--session", session, *(["--gpus"] if gpus else []), "--")


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    problem = engine_problem()
    if problem:
        return [f"missing: Docker engine ({problem})"]
    import docker

    engine, flavour = client(), pick_flavour(flavour)
    lines = ["ok: Docker engine"]
    for name in stacks:
        ref = image_ref(load_stack(name), flavour, cluster.container_dir if cluster else None)
        try:
            lines.append(f"ok: image {ref} ({engine.images.get(ref).id[:19]})")
        except docker.errors.ImageNotFound:
            lines.append(f"missing: image {ref} (make containers STACK={name} FLAVOUR={flavour} TOOL=docker)")
    return lines


def container_env(environ: dict) -> dict:
    """What launchers and cases set (suite.base.env_policy's policy), not the host's whole environment."""
    return {**forwarded_env(environ), "HOME": "/tmp"}  # the caller's uid has no home in the image


# ---- the program the prefix runs on each host, and what ends its containers ---------------------

def cleanup(env: StackEnv, log=print) -> None:
    """Removes every container of this run's session still there: those whose client process
    (the program below) was killed before it could stop them."""
    session = env.prefix[env.prefix.index("--session") + 1] if "--session" in env.prefix else None
    if not session:
        return
    try:
        left = client().containers.list(all=True, filters={"label": f"{SESSION_LABEL}={session}"})
        for container in left:
            container.remove(force=True)
    except Exception as exc:  # any kind: the SDK raises several kinds; the record must still be written
        log(f"warning: docker: could not remove this run's containers: {str(exc).splitlines()[0][:160]}")
        return
    if left:
        log(f"docker: removed {len(left)} container(s) that outlived their process")


def run_options(image: str, argv: list[str], binds: list[str], gpus: bool, environ: dict, cwd: str,
                session: str = "") -> dict:
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
        "labels": {SESSION_LABEL: session, f"{images.LABEL}.client_pid": str(os.getpid())},
        "device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.runtimes.docker",
                                     description="Run one program of a stack in its Docker image.")
    parser.add_argument("--image", required=True)
    parser.add_argument("--bind", default="", help="comma-separated folders, bound at their own paths")
    parser.add_argument("--gpus", action="store_true")
    parser.add_argument("--session", default="", help="labels the container; the runtime's cleanup removes by it")
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program to run")
    import docker

    container = docker.from_env().containers.run(**run_options(args.image, program, args.bind.split(","),
                                                               args.gpus, dict(os.environ), os.getcwd(), args.session))

    def stop(signum, frame):
        container.stop(timeout=5)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: the ssh connection went away
        signal.signal(sig, stop)
    try:
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return container.wait()["StatusCode"]
    finally:
        container.remove(force=True)


# ---- building ----------------------------------------------------------------------------------

def recipe(fl) -> Recipe:
    """containers/<stack>/<flavour>.Dockerfile: the shared build steps as RUN lines, each after the COPY of
    what it reads, the image's test run at build time, the labels last (they change with every recipe
    change: the layers before them stay cached); the base is a build argument (the pinned one by default)."""
    lines = ["# BASE: the pinned upstream image by default; `make containers BASE=debian` passes a Debian",
             "# base made from Debian's packages. WHEELS: the wheel folder's URL pip installs from.",
             f"ARG BASE={fl.base.removeprefix('docker://')}", "FROM ${BASE}", *images.header(fl),
             "# Build in a context holding containers/ (python -m suite containers build --tool docker does).",
             *(f"# {line}" for line in images.help_text(fl)), "", "ARG BASE", "ARG WHEELS"]
    for step in images.build_steps(fl):
        lines += copy_lines(fl, step.reads)
        lines.append("RUN " + " && \\\n    ".join(step.commands))
    environment = images.environment(fl).items()
    lines.append("ENV " + " ".join(f'{k}="{v.replace("$PATH", "${PATH}")}"' for k, v in environment))
    lines.append("# the definition's %test, run at build time")
    lines.append("RUN " + " && \\\n    ".join(images.test_commands(fl)))
    lines += [f'LABEL {k}="{v}"' for k, v in images.labels(fl, "${BASE}").items()]
    return Recipe(fl.stack.dir / f"{fl.name}.Dockerfile", "\n".join(lines) + "\n")


def copy_lines(fl, files) -> list[str]:
    """COPY lines putting files of the stack folder at the same place under the image's recipe folder, one
    line per folder."""
    folders: dict[str, list[str]] = {}
    for path in files:
        relative = path.relative_to(fl.stack.dir)
        destination = f"{(Path(images.RECIPE) / relative.parent).as_posix()}/"
        folders.setdefault(destination, []).append(f"containers/{fl.stack.name}/{relative.as_posix()}")
    return [f"COPY {' '.join(sources)} {destination}" for destination, sources in folders.items()]


def context_files(fl, dockerfile: Path) -> list[Path]:
    """What the build context holds: the Dockerfile and the files its steps read."""
    return [dockerfile, *(path for step in images.build_steps(fl) for path in step.reads)]


def build_problem() -> str | None:
    return engine_problem()


def check_build(fl, base: str) -> None:
    """A Debian base made here (BASE=debian) has no CUDA, and needs mmdebstrap or debootstrap."""
    if base == "debian":
        base_images.check_debian(fl.name)


def build_image(fl, inputs, log=print) -> dict:
    """`docker build` of a flavour's Dockerfile through the engine's API on the host network, on the
    base inputs names (made here first for BASE=debian) and from its wheel folder, tagged by lock and
    base, with its metadata read back from the built image."""
    engine = client(timeout=600)
    if inputs.base == "debian":
        base = base_images.debian_base(engine, log, inputs.refresh_base)
    else:
        base = base_images.pinned_base(fl.base)
        require_pinned_base(engine, base["ref"])
    image_tag = tag(fl, base["kind"])
    dockerfile = recipe(fl).path
    log(f"containers: docker build {image_tag} from {dockerfile.relative_to(paths.ROOT)} on {base['ref']}")
    started = time.monotonic()
    image_id = stream_build(engine, fl, image_tag, dockerfile, {"BASE": base["ref"], "WHEELS": inputs.wheels}, log)

    facts, packages, _ = read_from_image(engine, image_tag)
    meta = images.write_image_meta(meta_path(fl.stack.name, fl.name), fl, image_tag,
                                       image_id.removeprefix("sha256:"), "docker", facts, packages, base)
    size_mb = engine.images.get(image_tag).attrs["Size"] / 1e6
    log(f"containers: {image_tag} {image_id} ({size_mb:.0f} MB, built in {time.monotonic() - started:.0f} s)")
    return meta


def require_pinned_base(engine, ref: str) -> None:
    import docker

    try:
        engine.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            engine.images.pull(ref)
        except docker.errors.APIError as exc:
            raise UsageError(f"cannot pull the pinned base {ref} ({str(exc).splitlines()[0][:120]}); "
                             "build on a Debian base made here instead: make containers BASE=debian") from None


def stream_build(engine, fl, tag: str, dockerfile: Path, buildargs: dict, log) -> str:
    """Builds, logging each step; raises RuntimeError with the build's last lines when it fails."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:  # only what the Dockerfile copies
        for path in context_files(fl, dockerfile):
            tar.add(path, arcname=f"containers/{fl.stack.name}/{path.relative_to(fl.stack.dir).as_posix()}")
    context.seek(0)
    image_id, tail = None, []
    for chunk in engine.api.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                                  network_mode="host", buildargs=buildargs, decode=True,
                                  dockerfile=f"containers/{fl.stack.name}/{dockerfile.name}"):
        if "error" in chunk:
            raise RuntimeError(f"docker build of {tag} failed: {chunk['error'].strip()}; last output: "
                               + " | ".join(tail[-5:]))
        image_id = chunk.get("aux", {}).get("ID", image_id)
        for line in chunk.get("stream", "").splitlines():
            if line.strip():
                tail = (tail + [line.strip()])[-20:]
                if line.startswith("Step "):
                    log(f"containers:   {line.strip()[:150]}")
    if not image_id:
        raise RuntimeError(f"docker build of {tag} gave no image; last output: " + " | ".join(tail[-5:]))
    return image_id


if __name__ == "__main__":
    sys.exit(main())
