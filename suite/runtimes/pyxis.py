"""Runs a stack from its image through pyxis, the SLURM plugin over enroot that NVIDIA's clusters
(DGX SuperPOD, the MLPerf submissions) and CSCS's Alps (as its Container Engine) run: SLURM itself
starts every process in the container, so this runtime works with SCHEDULER=slurm only.

Every program of the stack becomes srun options followed by the program, which the slurm scheduler
puts on the process's step (`srun --overlap ... --quiet OPTIONS PROGRAM ARGS`):

- `--container-image=IMAGE`: a squashfs file (`enroot import -o X.sqsh dockerd://TAG` of the Docker
  image `make containers TOOL=docker` built) or an enroot image reference (`nvcr.io#org/image:tag`);
- `--container-name=hpcdl-STACK-FLAVOUR-LOCK12`: pyxis unpacks the image once per node and job and
  the steps after the first reuse it; the lock in the name keeps a container of another lock apart;
- `--container-mounts=SRC:DST,...`: the checkout, the runs and data folders (at their own paths) and the
  profile's `[pyxis] mounts`; `--container-workdir` (the runs folder: the cases use absolute paths);
- `--container-env=NAMES`: what the suite sets for the stack (PYTHONPATH) and the framework variables
  of this environment (suite/base/env_policy.py) win over the image's own values;
- `--no-container-mount-home` (`[pyxis] mount_home = true`: `--container-mount-home`), and
  `--container-writable` where the profile asks.

With `[pyxis] edf = true` (CSCS Alps) the same image, mounts, working folder and environment go into
an environment definition file (TOML) written under the runs folder, and each step gets
`--environment=FILE` instead.

The image is $SUITE_IMAGE, else `[pyxis] image` (`{stack}`, `{flavour}` and `{image_dir}` filled
in), else <image dir>/<stack>-<flavour>.sqsh. What is in it (stack, lock, packages, digest) comes from
its metadata: IMAGE.json beside a squashfs file (`python -m suite.runtimes.pyxis import` writes it),
else `[pyxis] metadata`, else the Docker build's <image dir>/<stack>-<flavour>.docker.json (a registry
image is the Docker image pushed). Neither enroot nor pyxis is needed on the host that plans the run;
srun must show pyxis's options (`srun --help`) on the one that starts it."""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from suite.base import paths
from suite.base.env_policy import forwarded_env
from suite.base.errors import UsageError
from suite.execution.plan import StackRequest
from suite.execution.plugins import Setting, fill
from suite.inputs.host_gpus import pick_flavour
from suite.instack.file_digest import file_digest
from suite.runtimes._image import Command, ImageRuntime, Run, Where
from suite.stacks import images
from suite.stacks.images import bind_list
from suite.stacks.recipes import load_stack

TEMPLATE_FIELDS = ("stack", "flavour", "image_dir")  # what `image` and `metadata` may hold, as {stack}
PROFILE = {
    "image": Setting(str, None, "the image: a squashfs file or an enroot reference (REGISTRY#IMAGE:TAG); "
                     "{stack}, {flavour} and {image_dir} are filled in (default: {image_dir}/{stack}-{flavour}.sqsh)",
                     fields=TEMPLATE_FIELDS),
    "metadata": Setting(str, None, "the image's metadata (JSON, as `make containers` writes it) where it is not "
                        "IMAGE.json beside a squashfs file nor the Docker build's; {stack}, {flavour}, {image_dir}",
                        fields=TEMPLATE_FIELDS),
    "edf": Setting(bool, False, "pass image, mounts and environment as an environment definition file "
                   "(srun --environment=FILE.toml, CSCS's Container Engine) instead of --container-* options"),
    "mounts": Setting(list, [], "further mounts, SRC:DST[:FLAGS] (flags joined by +, e.g. ro); SRC must exist"),
    "annotations": Setting(list, [], "EDF annotations, KEY=VALUE (e.g. com.hooks.aws_ofi_nccl.enabled=true)"),
    "writable": Setting(bool, False, "a writable container filesystem (--container-writable)"),
    "mount_home": Setting(bool, False, "mount the user's home (--container-mount-home); off: the image's "
                          "packages are not shadowed by ~/.local"),
    "name": Setting(bool, True, "name the container after the stack's lock (--container-name), so that it "
                    "is unpacked once per node and job"),
}
# What pyxis cannot carry in a mount: its list is comma-separated, its fields colon-separated, and
# enroot writes each mount as an fstab line.
UNMOUNTABLE = re.compile(r"[,:\s]")
REFERENCE = re.compile(r"^(?:[\w.-]+@)?(?:[\w.-]+(?::\d+)?#)?[\w./-]+(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$")
SRUN_HELP_TIMEOUT_S = 30


class Pyxis(ImageRuntime):
    name = "pyxis"
    PLANS_AHEAD = True  # a dry run plans for a cluster: its image and folders may be there only

    def start(self, want: StackRequest, log) -> tuple[dict, list[str]]:
        """The [pyxis] settings and the mounts, refused (warned of in a dry run) where pyxis could not make them."""
        if want.scheduler != "slurm":
            raise UsageError(f"RUNTIME=pyxis needs SCHEDULER=slurm: pyxis is a SLURM plugin, srun starts every "
                             f"container (scheduler here: {want.scheduler})")
        spec = settings(want.profile)
        mounts, missing = mount_list(want.binds, spec["mounts"])
        for problem in missing:
            if want.install:
                raise UsageError(problem)
            log(f"warning: on this machine: {problem}")
        return spec, mounts

    def locate(self, want: StackRequest, flavour: str, setup) -> Where:
        spec, _ = setup
        stack = want.stack.name
        image_dir = Path(want.image_dir or images.build_dir())
        image = image_of(stack, flavour, image_dir, spec)
        hint = (f"make containers STACK={stack} FLAVOUR={flavour} TOOL=docker, then "
                f"python -m suite.runtimes.pyxis import --stack {stack} --flavour {flavour}")
        return Where(image, meta_path(stack, flavour, image, image_dir, spec), hint,
                     missing_image(stack, flavour, image, hint))

    def command(self, run: Run, log) -> Command:
        spec, mounts = run.setup
        stack, image = run.want.stack.name, run.image
        if run.meta.get("flavour") not in (None, run.flavour):
            raise UsageError(f"image {image} is the {run.meta['flavour']} flavour of {stack}, not {run.flavour}")
        if run.want.install:
            require_pyxis(spec["edf"])
        profile_env = run.want.profile.env if run.want.profile else {}  # the cluster's [env], set on every host
        names = sorted({*run.env, *forwarded_env(os.environ, remote=True), *profile_env})
        name = container_name(stack, run.flavour, run.meta.get("lock_sha256") or "") if spec["name"] else None
        if spec["edf"]:
            text = edf_text(image, mounts, run.workdir, run.env, spec, f"{stack}/{run.flavour}")
            edf = edf_path(run.want, stack, run.flavour, text)
            if run.want.install:
                write_edf(edf, text)
            else:
                log(f"pyxis: environment definition {edf} (a real run writes it):\n{text.rstrip()}")
            options = (f"--environment={edf}",)
        else:
            options = srun_options(image, name, mounts, run.workdir, names, spec)
        return Command(options, provenance={"container": {"interface": "edf" if spec["edf"] else "pyxis",
                                                          "name": name, "mounts": mounts, "workdir": run.workdir}})


prepare = Pyxis().prepare


def settings(cluster) -> dict:
    """The profile's [pyxis] table with its defaults (no profile: the defaults)."""
    given = cluster.section("pyxis") if cluster else {}
    spec = {key: given.get(key, s.default) for key, s in PROFILE.items()}
    where = f"cluster profile {cluster.path}: [pyxis]" if cluster else "[pyxis]"
    for value in spec["annotations"]:
        if not re.fullmatch(r"[\w.-]+=\S*", value):
            raise UsageError(f"{where} annotations must be KEY=VALUE, got {value!r}")
    spec["where"] = where
    return spec


def image_of(stack: str, flavour: str, image_dir: Path, spec: dict) -> str:
    """A squashfs file's absolute path, or an enroot reference as it is."""
    given = os.environ.get("SUITE_IMAGE") or fill(spec["image"] or "{image_dir}/{stack}-{flavour}.sqsh",
                                                  stack=stack, flavour=flavour, image_dir=str(image_dir))
    if given.startswith(("/", ".", "~")) or given.endswith((".sqsh", ".squashfs")):
        return str(Path(given).expanduser().resolve())
    if not REFERENCE.match(given):
        raise UsageError(f"{spec['where']} image {given!r} is neither a squashfs file nor an enroot image "
                         "reference ([USER@][REGISTRY#]IMAGE[:TAG])")
    return given


def is_file_image(image: str) -> bool:
    return image.startswith("/")


def missing_image(stack: str, flavour: str, image: str, hint: str) -> str | None:
    if is_file_image(image) and not Path(image).is_file():
        return f"no {flavour} image of stack {stack} at {image}: {hint} (or set SUITE_IMAGE)"
    return None


def meta_path(stack: str, flavour: str, image: str, image_dir: Path, spec: dict) -> Path:
    """`[pyxis] metadata`, else IMAGE.json beside a squashfs file, else the Docker build's."""
    if spec["metadata"]:
        return Path(fill(spec["metadata"], stack=stack, flavour=flavour, image_dir=str(image_dir)))
    if is_file_image(image):
        return Path(f"{image}.json")
    return image_dir / f"{stack}-{flavour}.docker.json"


def mount_list(binds, extra: list[str]) -> tuple[list[str], list[str]]:
    """SRC:DST[:FLAGS] for the checkout, runs and data folders (bound at their own paths, as the other
    container runtimes do) and the profile's mounts, and what is wrong with a mount whose source is
    not on this host (the caller refuses it, or warns in a dry run). A mount that is not SRC:DST[:FLAGS]
    or a path pyxis cannot carry is refused here."""
    kept = bind_list(binds)
    if binds and not any(Path(binds[0]).resolve().is_relative_to(k) for k in kept):
        kept.append(str(Path(binds[0]).resolve()))  # the runs folder (the workdir): a real run makes it first
    mounts, missing = [f"{path}:{path}" for path in kept], []
    for mount in extra:
        fields = mount.split(":")
        if len(fields) not in (2, 3) or not all(fields[:2]):
            raise UsageError(f"[pyxis] mounts: {mount!r} is not SRC:DST[:FLAGS]")
        if not fields[1].startswith("/"):
            raise UsageError(f"[pyxis] mounts: the destination of {mount!r} must be an absolute path")
        if len(fields) == 3 and not re.fullmatch(r"[a-z]+(\+[a-z]+)*", fields[2]):
            raise UsageError(f"[pyxis] mounts: the flags of {mount!r} must be words joined by + (e.g. ro+rprivate)")
        if not Path(fields[0]).exists():
            missing.append(f"[pyxis] mounts: {fields[0]} does not exist on this host (mount {mount}): "
                           "pyxis would fail to start every step")
        mounts.append(mount)
    for mount in mounts:
        for path in mount.split(":")[:2]:
            if UNMOUNTABLE.search(path):
                raise UsageError(f"pyxis cannot mount {path!r}: its mounts are SRC:DST lists separated by commas, "
                                 "so a path must hold no comma, colon or whitespace (move the folder)")
    return mounts, missing


def container_name(stack: str, flavour: str, lock_sha256: str) -> str:
    return f"hpcdl-{stack}-{flavour}-{lock_sha256[:12] or 'nolock'}"


def srun_options(image: str, name: str | None, mounts: list[str], workdir: str, env_names: list[str],
                 spec: dict) -> tuple[str, ...]:
    return (f"--container-image={image}", *([f"--container-name={name}"] if name else []),
            f"--container-mounts={','.join(mounts)}", f"--container-workdir={workdir}",
            f"--container-env={','.join(env_names)}",
            "--container-mount-home" if spec["mount_home"] else "--no-container-mount-home",
            *(["--container-writable"] if spec["writable"] else []))


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string for the text here (no control characters)


def edf_text(image: str, mounts: list[str], workdir: str, env: dict, spec: dict, what: str) -> str:
    """An environment definition file of CSCS's Container Engine: image, mounts, workdir, env."""
    lines = [f"# {what}: written by hpc-dl-bench (suite/runtimes/pyxis.py); srun --environment=THIS_FILE",
             f"image = {toml_string(image)}",
             "mounts = [" + ", ".join(toml_string(m) for m in mounts) + "]",
             f"workdir = {toml_string(workdir)}",
             f"writable = {'true' if spec['writable'] else 'false'}", "", "[env]"]
    lines += [f"{key} = {toml_string(value)}" for key, value in sorted(env.items())]
    if spec["annotations"]:
        lines += ["", "[annotations]"]
        lines += [f"{toml_string(k)} = {toml_string(v)}" for k, v in (a.split("=", 1) for a in spec["annotations"])]
    return "\n".join(lines) + "\n"


def edf_path(want: StackRequest, stack: str, flavour: str, text: str) -> Path:
    """Under the runs folder (every node sees it), named by its content: the same file for every
    process and repetition of a run, a new one when anything in it changes."""
    runs = Path(want.binds[0]) if want.binds else paths.RUNS
    return runs.resolve() / "edf" / f"{stack}-{flavour}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"


def write_edf(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(text)
    os.replace(partial, path)


# ---- what the host that starts the steps must have ----------------------------------------------

def pyxis_problem(edf: bool = False) -> str | None:
    """None when this host's srun shows pyxis's options (and --environment for an EDF), else why not."""
    srun = shutil.which("srun")
    if not srun:
        return "srun is not on PATH (a SLURM login or compute node)"
    try:
        shown = subprocess.run([srun, "--help"], capture_output=True, text=True, timeout=SRUN_HELP_TIMEOUT_S,
                               check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"srun --help failed ({exc})"
    wanted = "--environment" if edf else "--container-image"
    if wanted not in shown.stdout + shown.stderr:
        return (f"srun --help shows no {wanted}: the pyxis plugin is not loaded here (plugstack.conf; "
                "https://github.com/NVIDIA/pyxis, with enroot on the compute nodes)")
    return None


def require_pyxis(edf: bool) -> None:
    problem = pyxis_problem(edf)
    if problem:
        raise UsageError(f"RUNTIME=pyxis: {problem}")


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    spec = settings(cluster)
    scheduler = cluster.scheduler if cluster else "local"
    if scheduler != "slurm":
        return [f"missing: SCHEDULER=slurm for runtime pyxis (a SLURM plugin: srun starts every container; "
                f"scheduler here: {scheduler})"]
    problem = pyxis_problem(spec["edf"])
    what = "srun --environment (CSCS Container Engine)" if spec["edf"] else "pyxis (srun --container-image)"
    lines = [f"ok: {what}" if not problem else f"missing: {what}: {problem}"]
    flavour = pick_flavour(flavour)
    runtime, setup = Pyxis(), (spec, [])
    for name in stacks:
        try:
            # the image and its metadata where prepare finds and reads them (the line names the make commands)
            want = StackRequest(load_stack(name), flavour, image_dir=cluster.container_dir, profile=cluster,
                                scheduler=scheduler)
            where = runtime.locate(want, flavour, setup)
            runtime.metadata(want, flavour, replace(where, hint=""), setup, lambda m: None)
            lines.append(f"ok: image {where.image} and its metadata")
        except UsageError as exc:
            lines.append(f"missing: {str(exc).split(': ')[0]} (make containers STACK={name} FLAVOUR={flavour} "
                         f"TOOL=docker; python -m suite.runtimes.pyxis import --stack {name} --flavour {flavour})")
    return lines


# ---- a squashfs file from the Docker image, and its metadata --------------------------------------

def import_image(stack: str, flavour: str, image_dir: Path, run_enroot: bool = True, log=print) -> dict:
    """`enroot import -o <image dir>/<stack>-<flavour>.sqsh dockerd://TAG` of the image the Docker build
    recorded, and IMAGE.sqsh.json: the Docker build's metadata with the squashfs file's own digest.
    run_enroot=False writes the metadata of a squashfs file made by hand."""
    docker_meta = images.read_image_meta(image_dir / f"{stack}-{flavour}.docker.json",
                                         f"make containers STACK={stack} FLAVOUR={flavour} TOOL=docker")
    target = image_dir / f"{stack}-{flavour}.sqsh"
    if run_enroot:
        enroot = shutil.which("enroot")
        if not enroot:
            raise UsageError("enroot is not on PATH (https://github.com/NVIDIA/enroot; it is in no Debian release)")
        partial = target.with_suffix(".sqsh.partial")
        partial.unlink(missing_ok=True)
        log(f"pyxis: enroot import -o {partial} dockerd://{docker_meta['image']}")
        subprocess.run([enroot, "import", "-o", str(partial), f"dockerd://{docker_meta['image']}"], check=True)
        os.replace(partial, target)
    if not target.is_file():
        raise UsageError(f"no squashfs file {target}")
    meta = {**docker_meta, "image": str(target), "image_sha256": file_digest(target), "tool": "enroot",
            "docker_image": docker_meta.get("image"), "docker_image_sha256": docker_meta.get("image_sha256")}
    Path(f"{target}.json").write_text(json.dumps(meta, indent=1) + "\n")
    log(f"pyxis: {target} sha256:{meta['image_sha256']}")
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.runtimes.pyxis",
                                     description="Make the squashfs image pyxis starts, from the Docker image.")
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="enroot import of the stack's Docker image, with its metadata")
    imp.add_argument("--stack", required=True)
    imp.add_argument("--flavour", default=None)
    imp.add_argument("--image-dir", type=Path, default=None)
    imp.add_argument("--metadata-only", action="store_true", help="the squashfs file is there: write its metadata")
    args = parser.parse_args(argv)
    load_stack(args.stack)
    try:
        import_image(args.stack, pick_flavour(args.flavour), args.image_dir or images.build_dir(),
                     not args.metadata_only)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
