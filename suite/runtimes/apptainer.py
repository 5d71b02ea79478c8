"""Runs a stack from its Apptainer image, and builds that image: every program of the stack becomes
`apptainer exec [--nv] --bind ... IMAGE.sif PROGRAM`, started on each host by whatever the launcher
and scheduler use there (the hybrid model: the host's ssh, srun or mpirun start the containers).

The image is <image dir>/<stack>-<flavour>.sif (image dir: the cluster's container_dir, else
$SUITE_IMAGE_DIR, else containers/build/; $SUITE_IMAGE names one file), with its metadata beside it
(IMAGE.sif.json). The flavour is cuda when this host has NVIDIA GPUs, else cpu
(FLAVOUR overrides). `make containers TOOL=apptainer` builds it from
containers/<stack>/<flavour>.def, rendered here from container.toml and the locks."""

import json
import os
import shutil
import subprocess
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.inputs.host_gpus import host_gpus, pick_flavour
from suite.stacks import image_base, images
from suite.stacks.images import Recipe, bind_list

IMAGES = "apptainer"  # what it builds images with (make containers TOOL=apptainer)
BUILD_PREFERENCE = 0  # TOOL=auto tries it first: it is what HPC sites run
BASES = ("pinned",)


def prepare(want: StackRequest, log=print) -> StackEnv:
    stack = want.stack
    tool = apptainer_program()
    gpus = host_gpus() if want.gpus is None else want.gpus
    flavour = pick_flavour(want.flavour, gpus)
    image = image_path(stack.name, flavour, want.image_dir)
    build_hint = f"make containers STACK={stack.name} FLAVOUR={flavour}"
    if not image.exists():
        raise UsageError(f"no {flavour} image of stack {stack.name} at {image}: build it with `{build_hint}` "
                         "(or set SUITE_IMAGE)")
    meta = images.read_image_meta(meta_path(image), build_hint)
    if meta.get("stack") != stack.name:
        raise UsageError(f"{image} holds stack {meta.get('stack')!r}, not {stack.name}")
    images.refuse_stale_image(stack, flavour, meta.get("lock_sha256"), log)
    log(f"stack {stack.name}: apptainer image {image} ({flavour}, sha256:{meta['image_sha256'][:12]})")
    return stack_env(tool, image, meta, gpus > 0, bind_list(want.binds))


def found_program() -> str | None:
    return os.environ.get("SUITE_APPTAINER") or shutil.which("apptainer") or shutil.which("singularity")


def apptainer_program() -> str:
    tool = found_program()
    if not tool:
        raise UsageError("RUNTIME=apptainer needs `apptainer` (or `singularity`) on PATH on this host")
    return tool


def image_path(stack: str, flavour: str, image_dir: Path | None = None) -> Path:
    if os.environ.get("SUITE_IMAGE"):
        return Path(os.environ["SUITE_IMAGE"])
    return Path(image_dir or images.build_dir()) / f"{stack}-{flavour}.sif"


def meta_path(image: Path | str) -> Path:
    return Path(f"{image}.json")


def stack_env(tool: str, image: Path, meta: dict, gpus: bool, binds: list[str]) -> StackEnv:
    prefix = (tool, "exec", *(["--nv"] if gpus else []), "--bind", ",".join(binds), str(image))
    return StackEnv(
        runtime="apptainer",
        bin_dir=f"{images.PREFIX}/bin",
        prefix=prefix,
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=meta.get("facts", {}),
        provenance={
            "stack": meta["stack"],
            "stack_lock_sha256": meta["lock_sha256"],
            "stack_recipe_sha256": meta.get("recipe_sha256"),
            "stack_location": f"{image}:{images.PREFIX}",
            "stack_packages": meta.get("packages", {}),
            "runtime": "apptainer",
            "image": str(image),
            "image_sha256": meta["image_sha256"],
            "image_flavour": meta.get("flavour"),
            "stack_flavour": meta.get("flavour"),
        },
    )


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    tool = found_program()
    lines = [f"ok: apptainer ({tool})" if tool else "missing: apptainer (or singularity) on PATH (runtime apptainer)"]
    flavour = pick_flavour(flavour)
    for stack in stacks:
        image = image_path(stack, flavour, cluster.container_dir if cluster else None)
        lines.append(f"ok: image {image}" if image.exists() else
                     f"missing: image {image} (make containers STACK={stack} FLAVOUR={flavour})")
    return lines


# ---- building ----------------------------------------------------------------------------------

def recipe(fl) -> Recipe:
    """containers/<stack>/<flavour>.def: the shared build steps as %post, the image's test as %test."""
    lines = ["Bootstrap: docker", f"From: {fl.base.removeprefix('docker://')}", *images.header(fl), "",
             "%files", f"    containers/{fl.stack.name} {images.RECIPE}", "", "%post", "    set -eu"]
    for step in images.build_steps(fl):
        lines += [f"    {cmd}" for cmd in step]
    lines += ["", "%environment", *(f'    export {k}="{v}"' for k, v in images.environment(fl).items()), "",
              "%labels", *(f"    {k} {v}" for k, v in images.labels(fl).items()), "",
              "%test", "    set -eu", *(f"    {cmd}" for cmd in images.test_commands(fl)), "",
              "%help", *(f"    {line}" for line in images.help_text(fl))]
    return Recipe(fl.stack.dir / f"{fl.name}.def", "\n".join(lines) + "\n")


def build_problem() -> str | None:
    return None if shutil.which("apptainer") else "not on PATH"


def build_image(fl, inputs, log=print) -> dict:
    """`apptainer build` of a flavour's definition into the image folder, with its sha256 and metadata.
    The definition's base is its pinned one; WHEELS in the environment points pip at the wheel folder."""
    image = images.build_dir() / f"{fl.stack.name}-{fl.name}.sif"
    image.parent.mkdir(parents=True, exist_ok=True)
    partial = image.with_suffix(".sif.partial")
    definition = recipe(fl).path.relative_to(paths.ROOT)
    log(f"containers: apptainer build {image} from {definition}")
    subprocess.run(["apptainer", "build", "--force", str(partial), str(definition)],
                   cwd=paths.ROOT, check=True, env={**os.environ, "WHEELS": inputs.wheels})
    os.replace(partial, image)
    digest = image_base.sha256_file(image)
    Path(f"{image}.sha256").write_text(f"{digest}  {image.name}\n")

    def cat(path):
        return subprocess.run(["apptainer", "exec", str(image), "cat", path], capture_output=True, text=True).stdout

    meta = images.write_image_meta(meta_path(image), fl, str(image), digest, "apptainer",
                                       json.loads(cat(images.FACTS) or "{}"),
                                       images.packages_from_pip_list(cat(images.PACKAGES)),
                                       image_base.pinned_base(fl.base))
    log(f"containers: {image} sha256:{digest}")
    return meta
