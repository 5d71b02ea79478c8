"""Runs a stack from its Apptainer image, and builds that image: every program of the stack becomes
`apptainer exec [--nv] --bind ... IMAGE.sif PROGRAM`, started on each host by whatever the launcher
and scheduler use there (the hybrid model: the host's ssh, srun or mpirun start the containers).

The image is <image dir>/<stack>-<flavour>.sif (image dir: the cluster's container_dir, else
$SUITE_IMAGE_DIR, else containers/build/; $SUITE_IMAGE names one file), with its metadata beside it
(IMAGE.sif.json). The flavour is cuda when this host has NVIDIA GPUs, else cpu
(FLAVOUR overrides). `make containers TOOL=apptainer` builds it from
containers/<stack>/<flavour>.def, rendered here from container.toml and the locks, on its pinned base
(a registry) or, with BASE=debian, on a base SIF made here from Debian's packages (`Bootstrap:
localimage`; no registry needed); with BASE=docker, from the stack's Docker image of the same lock
(`docker save`, then `apptainer build IMAGE.sif docker-archive:TAR`): definition.py and
from_docker.py. Before a run the image is
checked: present, a SIF (readable, of the size it was built with), of this stack and of the checkout's
lock; every folder to bind exists.

A cluster profile's [apptainer] table adds what a site needs: `binds` (scratch, project or software
folders, SRC[:DST]) and `gpus`, how the host's GPUs enter the container (nv: --nv, rocm: --rocm)."""

from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.plan import StackRequest
from suite.execution.plugins import Setting
from suite.inputs.host_gpus import pick_flavour
from suite.runtimes._image import Command, ImageRuntime, Run, Where
from suite.runtimes.apptainer import definition, from_docker
from suite.runtimes.apptainer.definition import recipe  # noqa: F401 (the plugin's recipe hook)
from suite.runtimes.apptainer.sif import (
    apptainer_program,
    check_sif,
    found_program,
    image_path,
    meta_path,
    runtime_version,
)
from suite.stacks import base_images, images
from suite.stacks.recipes import load_stack

IMAGES = "apptainer"  # what it builds images with (make containers TOOL=apptainer)
BUILD_PREFERENCE = 0  # TOOL=auto tries it first: it is what HPC sites run
BASES = ("pinned", "debian", "docker")  # docker: the SIF made from the Docker image of the lock
GPU_OPTIONS = {"nv": "--nv", "rocm": "--rocm", "none": None}
PROFILE = {
    "binds": Setting(list, [], "further folders bound into the container, SRC[:DST]; SRC must exist"),
    "gpus": Setting(str, "nv", f"how a GPU host's GPUs enter the container: {', '.join(GPU_OPTIONS)} "
                               "(--nv for NVIDIA, --rocm for AMD)"),
}


class Apptainer(ImageRuntime):
    name = "apptainer"
    COUNTS_GPUS = True

    def start(self, want: StackRequest, log) -> str:
        return apptainer_program()

    def locate(self, want: StackRequest, flavour: str, setup) -> Where:
        stack = want.stack.name
        image = image_path(stack, flavour, want.image_dir)
        hint = f"make containers STACK={stack} FLAVOUR={flavour}"
        missing = None if image.exists() else (
            f"no {flavour} image of stack {stack} at {image}: build it with `{hint}` (or set SUITE_IMAGE)")
        return Where(str(image), meta_path(image), hint, missing, named=str(image))

    def command(self, run: Run, log) -> Command:
        check_sif(Path(run.image), run.meta, run.hint)
        check_binds(run.want.binds)
        table = run.want.profile.section("apptainer") if run.want.profile else {}
        gpu_option = gpu_option_of(table.get("gpus", "nv"))
        binds = images.bind_pairs(run.want.binds, table.get("binds", []), "apptainer")
        version = runtime_version(run.setup)
        return Command(run_prefix(run.setup, gpu_option if run.gpus else None,
                                  [src if src == dst else f"{src}:{dst}" for src, dst in binds], run.image),
                       provenance={"runtime_version": version,
                                   **({"image_source": run.meta["built_from"]} if run.meta.get("built_from") else {})},
                       note=f", apptainer {version}")


prepare = Apptainer().prepare


def gpu_option_of(name: str) -> str | None:
    if name not in GPU_OPTIONS:
        raise UsageError(f"[apptainer] gpus must be one of {', '.join(GPU_OPTIONS)}, got {name!r}")
    return GPU_OPTIONS[name]


def check_binds(binds) -> None:
    """A folder to bind that does not exist is refused (apptainer would stop every rank on it); only the
    default data folder may be missing (cases that read no data do not need it)."""
    default_data = paths.data_dir().resolve()
    missing = [b for b in binds if b and not Path(b).exists() and Path(b).resolve() != default_data]
    if missing:
        raise UsageError(f"cannot bind {missing[0]} into the image: no such folder")


def run_prefix(tool: str, gpu_option: str | None, binds: list[str], image: str) -> tuple[str, ...]:
    return (tool, "exec", *([gpu_option] if gpu_option else []), "--bind", ",".join(binds), image)


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    tool = found_program()
    version = runtime_version(tool) if tool else None
    lines = [f"ok: apptainer {version or '(version unknown)'} ({tool})" if tool else
             "missing: apptainer (or singularity) on PATH (runtime apptainer)"]
    flavour = pick_flavour(flavour)
    for stack in stacks:
        image = image_path(stack, flavour, cluster.container_dir if cluster else None)
        lines.append(f"ok: image {image}" if not (why := image_problem(stack, flavour, cluster)) else
                     f"missing: image {image} ({why})")
    return lines


def image_problem(stack: str, flavour: str, cluster) -> str | None:
    """Why prepare would refuse the stack's image (the skeleton's checks of its metadata, then the SIF's),
    or None; a missing image: the line that builds it."""
    runtime = Apptainer()
    try:
        want = StackRequest(load_stack(stack), flavour, image_dir=cluster.container_dir if cluster else None)
        where = runtime.locate(want, flavour, None)
        if where.missing:
            return where.hint
        meta = runtime.checked_meta(want, flavour, where, None, lambda m: None)
        check_sif(Path(where.image), meta, where.hint)
    except UsageError as exc:
        return str(exc)
    return None


# ---- building ----------------------------------------------------------------------------------

def build_problem() -> str | None:
    return None if found_program() else "not on PATH"


def check_build(fl, base: str) -> None:
    """A Debian base made here (BASE=debian) has no CUDA, and needs mmdebstrap or debootstrap; BASE=docker
    needs the Docker image of the flavour's lock in the engine."""
    if base == "debian":
        base_images.check_debian(fl.name)
    elif base == "docker":
        from_docker.docker_source(fl)


def build_image(fl, inputs, log=print) -> dict:
    """`make containers TOOL=apptainer`: the SIF from the flavour's definition (definition.py), or with
    BASE=docker from the stack's Docker image (from_docker.py); its metadata beside it."""
    if inputs.base == "docker":
        return from_docker.build_from_docker(fl, log)
    return definition.build_from_definition(fl, inputs, log)
