"""Runs a stack from its Charliecloud image, unprivileged (LANL's and other centres' way): every
program of the stack becomes `ch-run --set-env --set-env=HOME=/tmp --bind=SRC:DST ... --cd=<runs folder>
IMAGE -- PROGRAM ARGS`, started on each host by whatever the launcher and scheduler use there (local
processes, ssh, srun), as Apptainer's are. --set-env applies the image's environment (IMAGE/ch/environment:
the stack on PATH); ch-run starts in / unless told (the cases use absolute paths, so the runs folder
serves every process) and refuses to start without $USER (set for the processes where this
environment lacks it).

The image is a directory, <image dir>/<stack>-<flavour>.ch (image dir: the cluster's container_dir,
else $SUITE_IMAGE_DIR, else containers/build/; $SUITE_IMAGE names one), with its metadata beside it
(DIR.json: stack, lock, packages, and the sha256 of the filesystem tarball it was unpacked from).
`make containers TOOL=charliecloud` makes it from the stack's Docker image (the same Dockerfile and
lock; built first where the engine lacks it): `docker export` of the image's filesystem, `ch-convert -i
tar -o dir`, and the image's environment written to DIR/ch/environment: the very filesystem the Docker
image's tests ran. (A second build with `ch-image build` took about as long here, 32 s for pytorch's cpu
image from a local wheel folder, but needs the Dockerfile's `FROM ${BASE}` rewritten for ch-image 0.31,
fakeroot for apt (--force), and reinstalls every package.)
Debian: apt-get install charliecloud-runtime (ch-run) charliecloud-builders (ch-convert, ch-image)."""

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from suite.base.errors import UsageError
from suite.execution import plugins
from suite.execution.plan import StackRequest
from suite.execution.plugins import Setting
from suite.inputs.host_gpus import pick_flavour
from suite.runtimes._image import Command, ImageRuntime, Run, Where
from suite.stacks import images

IMAGES = "Charliecloud's ch-convert with a Docker engine"  # make containers TOOL=charliecloud
BUILD_PREFERENCE = 2  # TOOL=auto tries apptainer, then docker, then this
BASES = ("pinned", "debian")  # those of the Docker image it converts
PROFILE = {
    "binds": Setting(list, [], "further folders bound into the container, SRC[:DST]; SRC must exist"),
}
INSTALL_HINT = "Debian: apt-get install charliecloud-runtime charliecloud-builders"


def ch_run() -> str | None:
    return os.environ.get("SUITE_CH_RUN") or shutil.which("ch-run")


class Charliecloud(ImageRuntime):
    name = "charliecloud"

    def start(self, want: StackRequest, log) -> str:
        tool = ch_run()
        if not tool:
            raise UsageError(f"RUNTIME=charliecloud needs ch-run on PATH on this host ({INSTALL_HINT})")
        return tool

    def locate(self, want: StackRequest, flavour: str, setup) -> Where:
        stack = want.stack.name
        image = image_path(stack, flavour, want.image_dir)
        hint = f"make containers STACK={stack} FLAVOUR={flavour} TOOL=charliecloud"
        missing = None if (image / "bin").exists() else (
            f"no {flavour} Charliecloud image of stack {stack} at {image}: build it with `{hint}` (or set SUITE_IMAGE)")
        return Where(str(image), meta_path(image), hint, missing, named=str(image))

    def command(self, run: Run, log) -> Command:
        table = run.want.profile.section("charliecloud") if run.want.profile else {}
        binds = images.bind_pairs(run.want.binds, table.get("binds", []), "charliecloud")
        mount_points(Path(run.image), binds)
        env = {} if os.environ.get("USER") else {"USER": pwd.getpwuid(os.getuid()).pw_name}  # ch-run needs it
        return Command(
            run_prefix(run.setup, run.image, [f"{src}:{dst}" for src, dst in binds], run.workdir), env,
            # image_source: what it was unpacked from, the Docker image of the same Dockerfile and lock (its ID);
            # image_sha256 is the digest of the exported filesystem tarball, which differs between two exports
            {"image_source": {"docker_image": run.meta.get("docker_image"),
                              "docker_image_sha256": run.meta.get("docker_image_sha256")}})


prepare = Charliecloud().prepare


def image_path(stack: str, flavour: str, image_dir: Path | None = None) -> Path:
    if os.environ.get("SUITE_IMAGE"):
        return Path(os.environ["SUITE_IMAGE"]).resolve()
    return (Path(image_dir or images.build_dir()) / f"{stack}-{flavour}.ch").resolve()


def meta_path(image: Path) -> Path:
    return Path(f"{image}.json")


def mount_points(image: Path, binds: list[tuple[str, str]]) -> None:
    """ch-run binds onto folders that exist in the image (it is mounted read-only): make them. /tmp is
    the host's inside the container (ch-run shares it), so folders below it are there already."""
    for _, dst in binds:
        point = image / dst.lstrip("/")
        if point.is_dir() or Path(dst).is_relative_to("/tmp"):
            continue
        try:
            point.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"the Charliecloud image {image} has no folder {dst} to bind onto, and it cannot be made "
                             f"({exc.strerror}): make it as the image's owner, mkdir -p {point}") from None


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    tool = ch_run()
    lines = [f"ok: ch-run ({tool})" if tool else f"missing: ch-run on PATH (runtime charliecloud; {INSTALL_HINT})"]
    convert = shutil.which("ch-convert")
    lines.append(f"ok: ch-convert ({convert})" if convert else
                 f"missing: ch-convert on PATH (make containers TOOL=charliecloud; {INSTALL_HINT})")
    flavour = pick_flavour(flavour)
    for stack in stacks:
        image = image_path(stack, flavour, cluster.container_dir if cluster else None)
        lines.append(f"ok: image {image}" if meta_path(image).exists() else
                     f"missing: image {image} (make containers STACK={stack} FLAVOUR={flavour} TOOL=charliecloud)")
    return lines


def run_prefix(tool: str, image: str, binds: list[str], workdir: str) -> tuple[str, ...]:
    """ch-run with the image's environment, HOME in the container's /tmp (the caller's home is not in
    the image; ch-run shares the host's /tmp), the folders bound, then the program after `--`."""
    return (tool, "--set-env", "--set-env=HOME=/tmp", *(f"--bind={b}" for b in binds), f"--cd={workdir}",
            image, "--")


# ---- building: ch-convert of the Docker image's filesystem -----------------------------------------

def recipe(fl):
    return None  # the Docker image's: containers/<stack>/<flavour>.Dockerfile


def build_problem() -> str | None:
    if not shutil.which("ch-convert"):
        return f"ch-convert is not on PATH ({INSTALL_HINT})"
    return plugins.load("runtimes", "docker").build_problem()


def check_build(fl, base: str) -> None:
    plugins.load("runtimes", "docker").check_build(fl, base)


def build_image(fl, inputs, log=print) -> dict:
    """The flavour's Docker image (built now where the engine lacks the one of this lock and base),
    its filesystem exported, hashed and unpacked with ch-convert into <image dir>/<stack>-<flavour>.ch."""
    import docker

    docker_rt = plugins.load("runtimes", "docker")
    docker_meta = current_docker_image(fl, inputs.base)
    if docker_meta is None:
        docker_meta = docker_rt.build_image(fl, inputs, log)
    image = image_path(fl.stack.name, fl.name, images.build_dir())
    image.parent.mkdir(parents=True, exist_ok=True)
    tarball = image.with_suffix(".ch.tar")
    started = time.monotonic()
    engine = docker.from_env(timeout=600)
    container = engine.containers.create(docker_meta["image"], command=["true"])
    digest = hashlib.sha256()
    try:
        with open(tarball, "wb") as out:
            for chunk in container.export(chunk_size=1 << 20):
                digest.update(chunk)
                out.write(chunk)
    finally:
        container.remove(force=True)
    exported = time.monotonic()
    partial = image.with_suffix(".ch.partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = {**os.environ, "USER": os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name}
    subprocess.run(["ch-convert", "-i", "tar", "-o", "dir", str(tarball), str(partial)], check=True, env=env,
                   capture_output=True)
    tarball.unlink()
    (partial / "ch").mkdir(exist_ok=True)
    (partial / "ch" / "environment").write_text(
        "".join(f"{k}={v}\n" for k, v in images.environment(fl).items()))  # ch-run --set-env reads it
    shutil.rmtree(image, ignore_errors=True)
    os.replace(partial, image)
    meta = {**docker_meta, "image": str(image), "image_sha256": digest.hexdigest(), "tool": "charliecloud",
            "docker_image": docker_meta.get("image"), "docker_image_sha256": docker_meta.get("image_sha256"),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    meta_path(image).write_text(json.dumps(meta, indent=1) + "\n")
    log(f"containers: {image} from {docker_meta['image']} (export {exported - started:.1f} s, ch-convert "
        f"{time.monotonic() - exported:.1f} s; filesystem sha256:{meta['image_sha256'][:12]})")
    return meta


def current_docker_image(fl, base: str) -> dict | None:
    """The Docker build's metadata of this flavour where the engine has that image and it is of the
    checkout's lock and the base asked for; None: build it."""
    import docker

    try:
        meta = json.loads((images.build_dir() / f"{fl.stack.name}-{fl.name}.docker.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("lock_sha256") != fl.lock_sha256 or (meta.get("base") or {}).get("kind", "pinned") != base:
        return None
    try:
        docker.from_env(timeout=30).images.get(meta["image"])
    except (docker.errors.DockerException, KeyError):
        return None
    return meta


