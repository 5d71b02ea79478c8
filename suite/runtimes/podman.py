"""Runs a stack from its image with rootless Podman, or with NERSC's podman-hpc (Perlmutter) where the
profile names it: every program of the stack becomes

    podman run --rm --init --network=host --ipc=host --userns=keep-id --label=...session=ID
        --volume=SRC:SRC ... --workdir=<runs folder> --env=OMP_* ... --env=PATH=... --env=HOME=/tmp
        [--device=nvidia.com/gpu=all] IMAGE PROGRAM ARGS

started on each host by whatever the launcher and scheduler use there, as Apptainer's are. GPUs come
through CDI (`nvidia-ctk cdi generate` on the host) or, with `[podman] command = "podman-hpc"`,
podman-hpc's `--gpu` module (and `--mpi` where `[podman] mpi = true`); podman-hpc maps the user itself.

The image is the stack's Docker image (the same Dockerfile and lock): $SUITE_IMAGE, else the tag the
Docker build recorded in <image dir>/<stack>-<flavour>.docker.json, whose metadata (stack, lock,
packages) the record carries with the image ID in Podman's storage. Bring it into the user's storage with
`docker save TAG | podman load` (any user; `podman pull docker-daemon:TAG` needs the engine's default
socket; podman-hpc: then `podman-hpc migrate TAG`). Debian: apt-get install podman catatonit uidmap
(4.3: rootless runs need --network=host or none, as here, and subuid/subgid ranges for the user).
A dry run renders every process's line without Podman; a real run checks the image is in its storage."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from suite.base.env_policy import forwarded_patterns
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.execution.plugins import Setting
from suite.inputs.host_gpus import pick_flavour
from suite.runtimes._image import Command, ImageRuntime, Run, Where
from suite.stacks import images
from suite.stacks.images import bind_list

PROFILE = {
    "command": Setting(str, "podman", "the program that runs containers: podman, or podman-hpc (NERSC)"),
    "mpi": Setting(bool, False, "podman-hpc's --mpi module (the host's MPI and PMI in the container)"),
    "options": Setting(list, [], "further `podman run` options, e.g. [\"--ulimit=nofile=32768:32768\"]"),
}
SESSION_LABEL = f"{images.LABEL}.session"
PATH_IN_IMAGE = f"{images.PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "Debian: apt-get install podman catatonit uidmap; NERSC: podman-hpc is there already"
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


class Podman(ImageRuntime):
    name = "podman"

    def start(self, want: StackRequest, log) -> tuple[dict, str | None]:
        """The [podman] settings and the program (None: not on this machine, which a dry run warns of)."""
        spec = settings(want.profile)
        found = shutil.which(spec["command"])
        if not found:
            if want.install:
                raise UsageError(f"RUNTIME=podman needs {spec['command']} on PATH on this host ({INSTALL_HINT})")
            log(f"warning: on this machine: no {spec['command']} on PATH ({INSTALL_HINT})")
        return spec, found

    def locate(self, want: StackRequest, flavour: str, setup) -> Where:
        """The Docker build's image: its metadata names the tag ($SUITE_IMAGE names another)."""
        stack = want.stack.name
        image_dir = Path(want.image_dir or images.build_dir())
        return Where(os.environ.get("SUITE_IMAGE") or None, image_dir / f"{stack}-{flavour}.docker.json",
                     f"make containers STACK={stack} FLAVOUR={flavour} TOOL=docker, then podman pull docker-daemon:TAG")

    def command(self, run: Run, log) -> Command:
        spec, found = run.setup
        stored = {}
        if run.want.install and found:  # the record names the image in this user's storage
            stored = {"image_sha256": stored_image_id(found, spec["command"], run.image, run.meta)}
        binds = bind_list(run.want.binds)
        if run.workdir not in binds and not any(Path(run.workdir).is_relative_to(b) for b in binds):
            binds.append(run.workdir)  # the runs folder: a real run makes it before this
        gpus = run.flavour == "cuda"  # the cuda image is run with the host's GPUs, the cpu image without
        prefix = run_prefix(found or spec["command"], spec, run.image, binds, run.workdir, gpus, uuid.uuid4().hex[:16],
                            profile_names(run.want.profile))
        return Command(prefix, meta=stored, tool=spec["command"])


prepare = Podman().prepare


def stored_image_id(tool: str, command: str, ref: str, meta: dict) -> str:
    """The ID of `ref` in this user's storage; refused where it is not there, or where the tag is the
    Docker build's but holds another image (loaded before a rebuild): the record would name the wrong one."""
    load = f"docker save {ref} | {command} load" + (f", then podman-hpc migrate {ref}" if command == "podman-hpc" else
                                                    f" (or podman pull docker-daemon:{ref})")
    found = subprocess.run([tool, "image", "inspect", "--format={{.Id}}", ref], capture_output=True, text=True,
                           check=False, timeout=120)
    if found.returncode != 0:
        said = (found.stderr.strip().splitlines() or [""])[-1]
        why = "" if "image not known" in said or not said else f" ({said})"
        raise UsageError(f"{command} has no image {ref} in this user's storage{why}: {load}")
    image_id = found.stdout.strip().removeprefix("sha256:")
    if ref == meta["image"] and meta.get("image_sha256") and image_id != meta["image_sha256"]:
        raise UsageError(f"{command}'s image {ref} is {image_id[:12]}, not the Docker build's "
                         f"{meta['image_sha256'][:12]}: load it again, {load}")
    return image_id


def profile_names(profile) -> list[str]:
    """The names the cluster profile's [env] sets: podman passes only the variables it is told of."""
    return sorted(profile.env) if profile else []


def run_prefix(tool: str, spec: dict, ref: str, binds: list[str], workdir: str, gpus: bool,
               session: str, site_names: list[str] = ()) -> tuple[str, ...]:
    hpc = spec["command"] == "podman-hpc"
    return (tool, "run", "--rm", "--init", "--network=host", "--ipc=host",
            # podman-hpc maps the user itself; root's podman refuses keep-id (root is root in the container)
            *([] if hpc or os.geteuid() == 0 else ["--userns=keep-id"]),
            f"--label={SESSION_LABEL}={session}", *(f"--volume={b}:{b}" for b in binds), f"--workdir={workdir}",
            # what launchers and cases set (suite.base.env_policy), not the host's whole environment
            *(f"--env={pattern}" for pattern in [*forwarded_patterns(), *site_names]), f"--env=PATH={PATH_IN_IMAGE}",
            "--env=HOME=/tmp",
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
            # killed at once, as Docker's force removal does: their client, which would have stopped them, is gone
            subprocess.run([env.prefix[0], "rm", "--force", "--time=0", *left], capture_output=True, check=False,
                           timeout=120)
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
