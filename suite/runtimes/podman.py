"""Runs a stack from its image with rootless Podman, or with NERSC's podman-hpc (Perlmutter) where the
profile names it: every program of the stack becomes

    podman run --rm --init --network=host --ipc=host --userns=keep-id --label=...session=ID
        --volume=SRC:SRC ... --workdir=<runs folder> --env-host --env=PATH=... --env=HOME=/tmp
        [--device=nvidia.com/gpu=all] IMAGE PROGRAM ARGS

started on each host by whatever the launcher and scheduler use there, as Apptainer's are. GPUs come
through CDI (`nvidia-ctk cdi generate` on the host) or, with `[podman] command = "podman-hpc"`,
podman-hpc's `--gpu` module (and `--mpi` where `[podman] mpi = true`); podman-hpc maps the user itself.

The image is the stack's Docker image (the same Dockerfile and lock): $SUITE_IMAGE, else the tag the
Docker build recorded in <image dir>/<stack>-<flavour>.docker.json, whose metadata (stack, lock,
packages, image ID) the record carries. Bring it into the user's Podman storage with `podman pull
docker-daemon:TAG` (or `podman load -i` of a `docker save` tarball; podman-hpc: then `podman-hpc
migrate TAG`). Debian: apt-get install podman (4.3: rootless runs need --network=host or none, as here).
A dry run renders every process's line without Podman; a real run checks the image is in its storage."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.execution.plugins import Setting
from suite.inputs.host_gpus import pick_flavour
from suite.stacks import images
from suite.stacks.images import bind_list

PROFILE = {
    "command": Setting(str, "podman", "the program that runs containers: podman, or podman-hpc (NERSC)"),
    "mpi": Setting(bool, False, "podman-hpc's --mpi module (the host's MPI and PMI in the container)"),
    "options": Setting(list, [], "further `podman run` options, e.g. [\"--ulimit=nofile=32768:32768\"]"),
}
SESSION_LABEL = f"{images.LABEL}.session"
PATH_IN_IMAGE = f"{images.PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "Debian: apt-get install podman catatonit (--init); NERSC: podman-hpc is there already"
COMMANDS = ("podman", "podman-hpc")


def settings(cluster) -> dict:
    given = cluster.section("podman") if cluster else {}
    spec = {key: given.get(key, s.default) for key, s in PROFILE.items()}
    if spec["command"] not in COMMANDS:
        raise UsageError(f"[podman] command must be one of {', '.join(COMMANDS)}, got {spec['command']!r}")
    bad = [o for o in spec["options"] if not o.startswith("--") or " " in o]
    if bad:
        raise UsageError(f"[podman] options must be `podman run` options written --name=value, got {bad[0]!r}")
    return spec


def prepare(want: StackRequest, log=print) -> StackEnv:
    stack = want.stack
    spec = settings(want.profile)
    found = shutil.which(spec["command"])
    if not found:
        if want.install:
            raise UsageError(f"RUNTIME=podman needs {spec['command']} on PATH on this host ({INSTALL_HINT})")
        log(f"warning: on this machine: no {spec['command']} on PATH ({INSTALL_HINT})")
    tool = found or spec["command"]
    flavour = pick_flavour(want.flavour, want.gpus)
    image_dir = Path(want.image_dir or images.build_dir())
    hint = f"make containers STACK={stack.name} FLAVOUR={flavour} TOOL=docker, then podman pull docker-daemon:TAG"
    meta = images.read_image_meta(image_dir / f"{stack.name}-{flavour}.docker.json", hint)
    if meta.get("stack") != stack.name:
        raise UsageError(f"image {meta.get('image')} holds stack {meta.get('stack')!r}, not {stack.name}")
    images.refuse_stale_image(stack, flavour, meta.get("lock_sha256"), log)
    ref = os.environ.get("SUITE_IMAGE") or meta["image"]
    if want.install and found:
        present = subprocess.run([found, "image", "exists", ref], capture_output=True, check=False, timeout=120)
        if present.returncode != 0:
            raise UsageError(f"{spec['command']} has no image {ref} in this user's storage: podman pull "
                             f"docker-daemon:{ref} (or podman load -i a `docker save` of it)")
    gpus = flavour == "cuda"  # the cuda image is run with the host's GPUs, the cpu image without
    binds = bind_list(want.binds)
    workdir = str(Path(want.binds[0]).resolve()) if want.binds else str(paths.RUNS)
    if workdir not in binds and not any(Path(workdir).is_relative_to(b) for b in binds):
        binds.append(workdir)  # the runs folder: a real run makes it before this
    session = uuid.uuid4().hex[:16]
    log(f"stack {stack.name}: {spec['command']} image {ref} ({flavour}, {meta.get('image_sha256', '')[:12]})")
    return StackEnv(
        runtime="podman",
        bin_dir=f"{images.PREFIX}/bin",
        prefix=run_prefix(tool, spec, ref, binds, workdir, gpus, session),
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=meta.get("facts", {}),
        provenance={**images.image_provenance(meta, "podman", ref)},
    )


def run_prefix(tool: str, spec: dict, ref: str, binds: list[str], workdir: str, gpus: bool,
               session: str) -> tuple[str, ...]:
    hpc = spec["command"] == "podman-hpc"
    return (tool, "run", "--rm", "--init", "--network=host", "--ipc=host",
            *([] if hpc else ["--userns=keep-id"]),  # podman-hpc maps the user itself
            f"--label={SESSION_LABEL}={session}", *(f"--volume={b}:{b}" for b in binds), f"--workdir={workdir}",
            "--env-host", f"--env=PATH={PATH_IN_IMAGE}", "--env=HOME=/tmp",
            *((["--gpu"] if hpc else ["--device=nvidia.com/gpu=all"]) if gpus else []),
            *(["--mpi"] if hpc and spec["mpi"] else []), *spec["options"], ref)


def cleanup(env: StackEnv, log=print) -> None:
    """Removes every container of this run's session still there (a client killed before --rm could)."""
    label = next((a.split("=", 1)[1] for a in env.prefix if a.startswith(f"--label={SESSION_LABEL}=")), None)
    if not label or not shutil.which(env.prefix[0]):
        return
    try:
        listed = subprocess.run([env.prefix[0], "ps", "--all", "--quiet", f"--filter=label={label}"],
                                capture_output=True, text=True, check=False, timeout=60)
        left = listed.stdout.split()
        if left:
            subprocess.run([env.prefix[0], "rm", "--force", *left], capture_output=True, check=False, timeout=120)
            log(f"podman: removed {len(left)} container(s) that outlived their process")
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"warning: podman: could not remove this run's containers: {exc}")


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    spec = settings(cluster)
    found = shutil.which(spec["command"])
    lines = [f"ok: {spec['command']} ({found})" if found else
             f"missing: {spec['command']} on PATH (runtime podman; {INSTALL_HINT})"]
    flavour = pick_flavour(flavour)
    image_dir = Path(cluster.container_dir if cluster and cluster.container_dir else images.build_dir())
    for name in stacks:
        meta = image_dir / f"{name}-{flavour}.docker.json"
        lines.append(f"ok: image metadata {meta}" if meta.exists() else
                     f"missing: image {meta.name} (make containers STACK={name} FLAVOUR={flavour} TOOL=docker, "
                     "then podman pull docker-daemon:TAG)")
    return lines
