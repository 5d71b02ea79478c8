"""Runs a stack from its Apptainer image, and builds that image: every program of the stack becomes
`apptainer exec [--nv] --bind ... IMAGE.sif PROGRAM`, started on each host by whatever the launcher
and scheduler use there (the hybrid model: the host's ssh, srun or mpirun start the containers).

The image is <image dir>/<stack>-<flavour>.sif (image dir: the cluster's container_dir, else
$SUITE_IMAGE_DIR, else containers/build/; $SUITE_IMAGE names one file), with its metadata beside it
(IMAGE.sif.json). The flavour is cuda when this host has NVIDIA GPUs, else cpu
(FLAVOUR overrides). `make containers TOOL=apptainer` builds it from
containers/<stack>/<flavour>.def, rendered here from container.toml and the locks, on its pinned base
(a registry) or, with BASE=debian, on a base SIF made here from Debian's packages (`Bootstrap:
localimage`; no registry needed). Before a run the image is checked: present, a SIF (readable, of the
size it was built with), of this stack and of the checkout's lock; every folder to bind exists."""

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.inputs.host_gpus import host_gpus, pick_flavour
from suite.instack.file_digest import file_digest
from suite.stacks import base_images, images
from suite.stacks.images import Recipe, bind_list
from suite.stacks.locks import load_stack

IMAGES = "apptainer"  # what it builds images with (make containers TOOL=apptainer)
BUILD_PREFERENCE = 0  # TOOL=auto tries it first: it is what HPC sites run
BASES = ("pinned", "debian")
SIF_MAGIC = b"SIF_MAGIC"  # at byte 32 of every SIF file, after its launch line


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
    check_sif(image, meta, build_hint)
    check_binds(want.binds)
    version = runtime_version(tool)
    log(f"stack {stack.name}: apptainer image {image} ({flavour}, sha256:{meta['image_sha256'][:12]}), "
        f"apptainer {version}")
    return stack_env(tool, image, meta, gpus > 0, bind_list(want.binds), version)


def check_sif(image: Path, meta: dict, build_hint: str) -> None:
    """Refuses an image that cannot be read, is no SIF, or is not the size it was built with (a copy
    cut short, or a file replaced since): every rank would fail on it, each in its own way."""
    try:
        with open(image, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise UsageError(f"cannot read the image {image} ({exc.strerror})") from None
    if head[32:32 + len(SIF_MAGIC)] != SIF_MAGIC:
        raise UsageError(f"{image} is not a SIF image (no SIF header): rebuild it with `{build_hint}`")
    built, size = meta.get("image_bytes"), image.stat().st_size
    if built is not None and size != built:
        raise UsageError(f"{image} has {size} bytes, not the {built} it was built with (cut short or replaced): "
                         f"rebuild it with `{build_hint}`")


def check_binds(binds) -> None:
    """A folder to bind that does not exist is refused (apptainer would stop every rank on it); only the
    default data folder may be missing (cases that read no data do not need it)."""
    default_data = paths.data_dir().resolve()
    missing = [b for b in binds if b and not Path(b).exists() and Path(b).resolve() != default_data]
    if missing:
        raise UsageError(f"cannot bind {missing[0]} into the image: no such folder")


@functools.cache
def runtime_version(tool: str) -> str | None:
    """`apptainer --version`'s number (1.4.5), or None when it does not answer."""
    try:
        said = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d+\.\d+[\w.+-]*)", said)
    return found.group(1) if found else None


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


def stack_env(tool: str, image: Path, meta: dict, gpus: bool, binds: list[str],
              version: str | None = None) -> StackEnv:
    prefix = (tool, "exec", *(["--nv"] if gpus else []), "--bind", ",".join(binds), str(image))
    return StackEnv(
        runtime="apptainer",
        bin_dir=f"{images.PREFIX}/bin",
        prefix=prefix,
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=meta.get("facts", {}),
        provenance={**images.image_provenance(meta, "apptainer", str(image)), "runtime_version": version},
    )


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    tool = found_program()
    version = runtime_version(tool) if tool else None
    lines = [f"ok: apptainer {version or '(version unknown)'} ({tool})" if tool else
             "missing: apptainer (or singularity) on PATH (runtime apptainer)"]
    flavour = pick_flavour(flavour)
    for stack in stacks:
        image = image_path(stack, flavour, cluster.container_dir if cluster else None)
        hint = f"make containers STACK={stack} FLAVOUR={flavour}"
        lines.append(f"ok: image {image}" if not (why := image_problem(stack, flavour, image, hint)) else
                     f"missing: image {image} ({why})")
    return lines


def image_problem(stack: str, flavour: str, image: Path, hint: str) -> str | None:
    """Why the image cannot run the stack (what prepare would refuse), or None."""
    if not image.exists():
        return hint
    try:
        meta = images.read_image_meta(meta_path(image), hint)
        if meta.get("stack") != stack:
            return f"it holds stack {meta.get('stack')!r}"
        check_sif(image, meta, hint)
        images.refuse_stale_image(load_stack(stack), flavour, meta.get("lock_sha256"), lambda m: None)
    except UsageError as exc:
        return str(exc)
    return None


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
    return None if found_program() else "not on PATH"


def check_build(fl, base: str) -> None:
    """A Debian base made here (BASE=debian) has no CUDA, and needs mmdebstrap or debootstrap."""
    if base == "debian":
        base_images.check_debian(fl.name)


def build_options() -> list[str]:
    """`--fakeroot` (what an unprivileged user builds with: /etc/subuid and /etc/subgid map them) unless
    SUITE_APPTAINER_BUILD_OPTIONS says otherwise (empty where root builds, `--remote` for a builder)."""
    return shlex.split(os.environ.get("SUITE_APPTAINER_BUILD_OPTIONS", "--fakeroot"))


def build_image(fl, inputs, log=print) -> dict:
    """`apptainer build` of a flavour's definition into the image folder, on its pinned base or on a
    Debian base SIF made here (BASE=debian), with its %test run, its sha256 and metadata beside it.
    What is built is the definition as rendered, with the base and the wheel folder's URL filled in:
    written beside the image as IMAGE.sif.def. The builder writes into the image folder."""
    tool = found_program()
    image = images.build_dir() / f"{fl.stack.name}-{fl.name}.sif"
    image.parent.mkdir(parents=True, exist_ok=True)
    if inputs.base == "debian":
        base_sif, base = debian_base(tool, log, inputs.refresh_base)
    else:
        base_sif, base = None, base_images.pinned_base(fl.base)
    rendered = recipe(fl)
    definition = Path(f"{image}.def")
    definition.write_text(build_definition(rendered.text, base_sif, inputs.wheels))
    partial = image.with_suffix(".sif.partial")
    log(f"containers: apptainer build {image} from {rendered.path.relative_to(paths.ROOT)} on {base['ref']}")
    started = time.monotonic()
    run_build(tool, partial, definition, rendered, log)
    os.replace(partial, image)
    digest = file_digest(image)
    Path(f"{image}.sha256").write_text(f"{digest}  {image.name}\n")

    def cat(path):
        return subprocess.run([tool, "exec", str(image), "cat", path], capture_output=True, text=True).stdout

    meta = images.write_image_meta(meta_path(image), fl, str(image), digest, "apptainer",
                                   json.loads(cat(images.FACTS) or "{}"),
                                   images.packages_from_pip_list(cat(images.PACKAGES)), base,
                                   {"image_bytes": image.stat().st_size, "tool_version": runtime_version(tool),
                                    "system_packages": base_images.parse_dpkg_list(cat(images.SYSTEM_PACKAGES))})
    log(f"containers: {image} sha256:{digest} ({image.stat().st_size / 1e6:.0f} MB, built in "
        f"{time.monotonic() - started:.0f} s)")
    return meta


def build_definition(text: str, base_sif: Path | None, wheels: str) -> str:
    """The rendered definition as built: on base_sif (`Bootstrap: localimage`) when given; WHEELS set in
    %post (apptainer build passes no environment to it); %test traced, so a failing test names its line."""
    lines = text.splitlines()
    if base_sif is not None:
        lines[0:2] = ["Bootstrap: localimage", f"From: {base_sif}"]
    out = []
    for line in lines:
        out.append(line)
        if line == "%post" and wheels:
            out.append(f'    export WHEELS="{wheels}"')
        elif line == "%test":
            out.append("    set -x")
    return "\n".join(out) + "\n"


SECTIONS = (("Running setup scriptlet", "%setup"), ("Copying", "%files"), ("Running post scriptlet", "%post"),
            ("Running testscript", "%test"), ("Creating SIF file", "the SIF file"))


def run_build(tool: str, partial: Path, definition: Path, rendered, log) -> None:
    """Runs the build, its output into IMAGE.sif.build.log; a failure raises UsageError naming the
    definition's section and the line that failed."""
    argv = [tool, "build", *build_options(), "--force", str(partial), str(definition)]
    build_log = Path(str(partial).removesuffix(".partial") + ".build.log")
    output: list[str] = []
    with open(build_log, "w") as keep:
        popen = subprocess.Popen(argv, cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in popen.stdout:
            keep.write(line)
            output.append(line.rstrip("\n"))
            if any(line.startswith(f"INFO:    {marker}") for marker, _ in SECTIONS):
                log(f"containers:   {line.strip()[9:]}")
        code = popen.wait()
    if code != 0:
        partial.unlink(missing_ok=True)
        raise UsageError(build_failure(rendered, output, code, build_log))


def build_failure(rendered, output: list[str], code: int, build_log: Path) -> str:
    """One line: which section of which definition failed, at which of its lines, and why."""
    section = next((name for line in reversed(output) for marker, name in SECTIONS
                    if line.startswith(f"INFO:    {marker}")), None)
    fatal = next((line.split(":", 1)[1].strip() for line in reversed(output) if line.startswith("FATAL:")),
                 f"exit {code}")
    for marker in ("%post", "%test", "%setup", "%files"):
        if marker in fatal:
            section = marker
    where = str(rendered.path.relative_to(paths.ROOT))
    traced = next((line[2:].strip() for line in reversed(output) if line.startswith("+ ")), None)
    number = definition_line(rendered.text, section, traced) if traced and section else None
    said = f" line {number}" if number else ""
    failing = f": `{traced[:160]}`" if traced else ""
    return (f"apptainer build failed in {section or 'the build'} of {where}{said}{failing} ({fatal[:200]}); "
            f"the build's output: {build_log}")


def definition_line(text: str, section: str, traced: str) -> int | None:
    """The number of the definition's line in that section that ran as `traced` (sh -x writes it with
    its quotes removed)."""
    def plain(s: str) -> str:
        return " ".join(s.replace("'", "").replace('"', "").split())

    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("%"):
            inside = line.split()[0] == section
        elif inside and line.strip() and (plain(line) == plain(traced)
                                          or plain(line).startswith(plain(traced)[:60])):
            return number
    return None


def debian_base(tool: str, log, refresh: bool = False) -> tuple[Path, dict]:
    """A base SIF of Debian's packages (base_images: mmdebstrap or debootstrap), made once into the
    image folder's bases/ and reused while its spec is the same (BASE_REFRESH=1 remakes it)."""
    spec = base_images.spec_sha256()
    folder = images.build_dir() / "bases"
    sif = folder / f"debian-{base_images.DEBIAN_SUITE}-{spec[:12]}.sif"
    if not refresh and sif.exists() and meta_path(sif).exists():
        log(f"containers: Debian base {sif} (made before; BASE_REFRESH=1 remakes it)")
        return sif, {**json.loads(meta_path(sif).read_text()), "ref": str(sif)}  # where it is now
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="debian-base-", dir=folder) as tmp:
        os.chmod(tmp, 0o755)  # the builder (an unprivileged user) reads the tarball
        tarball = Path(tmp) / "base.tar"
        log(f"containers: making a Debian {base_images.DEBIAN_SUITE} base with "
            f"{Path(base_images.bootstrap_tool()).name} ({', '.join(base_images.DEBIAN_PACKAGES)}) "
            f"from {base_images.DEBIAN_MIRROR}")
        release_date = base_images.bootstrap(Path(tmp), tarball)
        tarball.chmod(0o644)
        definition = Path(tmp) / "base.def"
        # device nodes stay out: the build cannot make them, and apptainer provides /dev at run time
        definition.write_text(f"Bootstrap: scratch\n\n%setup\n    tar -xf {tarball} -C \"$APPTAINER_ROOTFS\" "
                              "--exclude='./dev/*'\n")
        partial = images.build_dir() / f"{sif.name}.partial"  # the builder writes there
        done = subprocess.run([tool, "build", *build_options(), "--force", str(partial), str(definition)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            tail = " | ".join((done.stderr + done.stdout).strip().splitlines()[-4:])
            raise UsageError(f"apptainer build of the Debian base failed (exit {done.returncode}): {tail}")
        tar_sha256 = file_digest(tarball)
    os.replace(partial, sif)
    listed = subprocess.run([tool, "exec", str(sif), "sh", "-c", base_images.DPKG_LIST],
                            capture_output=True, text=True).stdout
    base = {"kind": "debian", "ref": str(sif), "image_sha256": file_digest(sif), "suite": base_images.DEBIAN_SUITE,
            "mirror": base_images.DEBIAN_MIRROR, "release_date": release_date, "tar_sha256": tar_sha256,
            "spec": spec, "packages": base_images.parse_dpkg_list(listed)}
    meta_path(sif).write_text(json.dumps(base, indent=1) + "\n")
    log(f"containers: Debian base {sif} ({sif.stat().st_size / 1e6:.0f} MB), Release of {release_date}, "
        f"made in {time.monotonic() - started:.0f} s")
    return sif, base
