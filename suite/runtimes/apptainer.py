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
(`docker save`, then `apptainer build IMAGE.sif docker-archive:TAR`). Before a run the image is
checked: present, a SIF (readable, of the size it was built with), of this stack and of the checkout's
lock; every folder to bind exists.

A cluster profile's [apptainer] table adds what a site needs: `binds` (scratch, project or software
folders, SRC[:DST]) and `gpus`, how the host's GPUs enter the container (nv: --nv, rocm: --rocm)."""

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
from suite.execution.plugins import Setting
from suite.inputs.host_gpus import host_gpus, pick_flavour
from suite.instack.file_digest import file_digest
from suite.stacks import base_images, images
from suite.stacks.images import Recipe
from suite.stacks.locks import load_stack

IMAGES = "apptainer"  # what it builds images with (make containers TOOL=apptainer)
BUILD_PREFERENCE = 0  # TOOL=auto tries it first: it is what HPC sites run
BASES = ("pinned", "debian", "docker")  # docker: the SIF made from the Docker image of the lock
GPU_OPTIONS = {"nv": "--nv", "rocm": "--rocm", "none": None}
PROFILE = {
    "binds": Setting(list, [], "further folders bound into the container, SRC[:DST]; SRC must exist"),
    "gpus": Setting(str, "nv", f"how a GPU host's GPUs enter the container: {', '.join(GPU_OPTIONS)} "
                               "(--nv for NVIDIA, --rocm for AMD)"),
}
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
    table = want.profile.section("apptainer") if want.profile else {}
    gpu_option = gpu_option_of(table.get("gpus", "nv"))
    binds = images.bind_pairs(want.binds, table.get("binds", []), "apptainer")
    version = runtime_version(tool)
    log(f"stack {stack.name}: apptainer image {image} ({flavour}, sha256:{meta['image_sha256'][:12]}), "
        f"apptainer {version}")
    return stack_env(tool, image, meta, gpu_option if gpus > 0 else None,
                     [src if src == dst else f"{src}:{dst}" for src, dst in binds], version)


def gpu_option_of(name: str) -> str | None:
    if name not in GPU_OPTIONS:
        raise UsageError(f"[apptainer] gpus must be one of {', '.join(GPU_OPTIONS)}, got {name!r}")
    return GPU_OPTIONS[name]


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


def stack_env(tool: str, image: Path, meta: dict, gpu_option: str | None, binds: list[str],
              version: str | None = None) -> StackEnv:
    prefix = (tool, "exec", *([gpu_option] if gpu_option else []), "--bind", ",".join(binds), str(image))
    return StackEnv(
        runtime="apptainer",
        bin_dir=f"{images.PREFIX}/bin",
        prefix=prefix,
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=meta.get("facts", {}),
        provenance={**images.image_provenance(meta, "apptainer", str(image)), "runtime_version": version,
                    **({"image_source": meta["built_from"]} if meta.get("built_from") else {})},
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
    """A Debian base made here (BASE=debian) has no CUDA, and needs mmdebstrap or debootstrap; BASE=docker
    needs the Docker image of the flavour's lock in the engine."""
    if base == "debian":
        base_images.check_debian(fl.name)
    elif base == "docker":
        docker_source(fl)


def build_options() -> list[str]:
    """`--fakeroot` (what an unprivileged user builds with: /etc/subuid and /etc/subgid map them) unless
    SUITE_APPTAINER_BUILD_OPTIONS says otherwise (empty where root builds, `--remote` for a builder)."""
    return shlex.split(os.environ.get("SUITE_APPTAINER_BUILD_OPTIONS", "--fakeroot"))


def build_image(fl, inputs, log=print) -> dict:
    """`apptainer build` of a flavour's definition into the image folder, on its pinned base or on a
    Debian base SIF made here (BASE=debian), with its %test run, its sha256 and metadata beside it.
    What is built is the definition as rendered, with the base and the wheel folder's URL filled in:
    written beside the image as IMAGE.sif.def. The builder writes into the image folder.
    BASE=docker makes the SIF from the Docker image instead (build_from_docker)."""
    if inputs.base == "docker":
        return build_from_docker(fl, log)
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
    meta = describe(tool, image, fl, base)
    log(f"containers: {image} sha256:{meta['image_sha256']} ({image.stat().st_size / 1e6:.0f} MB, built in "
        f"{time.monotonic() - started:.0f} s)")
    return meta


def describe(tool: str, image: Path, fl, base: dict, extra: dict | None = None) -> dict:
    """Writes IMAGE.sif.sha256 and IMAGE.sif.json: the stack's facts and packages as the image holds them
    (read in one container), its sha256, size and the Apptainer that built it."""
    digest = file_digest(image)
    Path(f"{image}.sha256").write_text(f"{digest}  {image.name}\n")
    files = (images.FACTS, images.PACKAGES, images.SYSTEM_PACKAGES)
    script = "; ".join(f"cat {path} 2>/dev/null; printf '\\036'" for path in files)
    said = subprocess.run([tool, "exec", str(image), "sh", "-c", script], capture_output=True, text=True).stdout
    facts, packages, system = (said.split("\x1e") + ["", "", ""])[:3]
    return images.write_image_meta(meta_path(image), fl, str(image), digest, "apptainer",
                                   json.loads(facts.strip() or "{}"), images.packages_from_pip_list(packages.strip()),
                                   base, {"image_bytes": image.stat().st_size, "tool_version": runtime_version(tool),
                                          "system_packages": base_images.parse_dpkg_list(system), **(extra or {})})


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


# ---- BASE=docker: the SIF made from the stack's Docker image -----------------------------------------

def docker_source(fl):
    """The newest tagged Docker image of the flavour's lock in the engine (`make containers TOOL=docker` built
    it, on either base; untagged ones are earlier builds whose tag has moved on); UsageError naming that make
    line where there is none."""
    import docker

    labels = {"stack": fl.stack.name, "flavour": fl.name, "lock_sha256": fl.lock_sha256}
    try:
        found = docker.from_env(timeout=60).images.list(
            filters={"label": [f"{images.LABEL}.{k}={v}" for k, v in labels.items()], "dangling": False})
    except Exception as exc:  # the SDK raises several kinds; all mean "no engine to ask"
        raise UsageError(f"BASE=docker makes the SIF from the Docker image, but no Docker engine answers: "
                         f"{str(exc).splitlines()[0][:160]}") from None
    found = [image for image in found if image.tags]
    if not found:
        raise UsageError(f"no Docker image of {fl.id} (lock {fl.lock_sha256[:12]}) in the engine to make the SIF "
                         f"from: build it with `make containers STACK={fl.stack.name} FLAVOUR={fl.name} TOOL=docker`"
                         + (" (BASE=debian where no registry answers)" if fl.name == "cpu" else ""))
    return max(found, key=lambda image: image.attrs["Created"])


def build_from_docker(fl, log=print) -> dict:
    """`apptainer build IMAGE.sif docker-archive:TAR` of the flavour's Docker image, saved into the image
    folder (the builder, perhaps an unprivileged user, reads it there); the image's test commands run in
    the SIF; its sha256 and metadata beside it as a definition's build writes them, with the Docker
    image it came from as built_from."""
    tool = found_program()
    source = docker_source(fl)
    ref = source.tags[0] if source.tags else source.id
    image = images.build_dir() / f"{fl.stack.name}-{fl.name}.sif"
    if (kept := made_before(image, source)) is not None:
        log(f"containers: {image} was made from the Docker image {ref} ({source.short_id}) before: kept")
        return kept
    image.parent.mkdir(parents=True, exist_ok=True)
    partial = image.with_suffix(".sif.partial")
    build_log = Path(f"{image}.build.log")
    log(f"containers: apptainer build {image} from the Docker image {ref} ({source.short_id})")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="docker-archive-", dir=image.parent) as tmp:
        os.chmod(tmp, 0o755)
        archive = Path(tmp) / "image.tar"
        save_image(source, archive)
        saved = time.monotonic()
        with open(build_log, "w") as keep:
            argv = [tool, "build", *build_options(), "--force", str(partial), f"docker-archive:{archive}"]
            code = subprocess.run(argv, stdout=keep, stderr=subprocess.STDOUT).returncode
    if code != 0:
        partial.unlink(missing_ok=True)
        raise UsageError(f"apptainer build of {image.name} from {ref} failed (exit {code}): "
                         f"{log_tail(build_log)}; the build's output: {build_log}")
    run_image_test(tool, partial, fl, build_log)
    os.replace(partial, image)
    Path(f"{image}.def").unlink(missing_ok=True)  # a definition's build wrote it: not this image's
    meta = describe(tool, image, fl, images.base_from_labels(source.labels),
                    {"built_from": {"docker_image": ref, "docker_image_sha256": source.id.removeprefix("sha256:")}})
    log(f"containers: {image} sha256:{meta['image_sha256']} ({image.stat().st_size / 1e6:.0f} MB, docker save "
        f"{saved - started:.0f} s, built in {time.monotonic() - started:.0f} s)")
    return meta


def made_before(image: Path, source) -> dict | None:
    """The metadata of the SIF at image where it is whole and was made from this very Docker image (the
    SIF is a function of it: nothing to make again), else None."""
    try:
        meta = json.loads(meta_path(image).read_text())
        check_sif(image, meta, "")
    except (OSError, ValueError, UsageError):
        return None
    made_from = (meta.get("built_from") or {}).get("docker_image_sha256")
    return meta if made_from == source.id.removeprefix("sha256:") else None


def save_image(source, archive: Path) -> None:
    """`docker save` of one image (named by its tag, so the archive holds one) into archive, readable by all."""
    with open(archive, "wb") as out:
        for chunk in source.save(chunk_size=1 << 20, named=bool(source.tags)):
            out.write(chunk)
    archive.chmod(0o644)


def run_image_test(tool: str, image: Path, fl, build_log: Path) -> None:
    """The image's test (a definition's %test, the Dockerfile's last RUN) run in the SIF, its output added
    to the build's; a failure removes the image and names the command."""
    script = "\n".join(["set -eux", *images.test_commands(fl)])
    with open(build_log, "a") as keep:
        keep.write("INFO:    Running the image's test\n")
        keep.flush()
        code = subprocess.run([tool, "exec", str(image), "sh", "-c", script], stdout=keep,
                              stderr=subprocess.STDOUT).returncode
    if code != 0:
        image.unlink(missing_ok=True)
        said = build_log.read_text().splitlines()
        failed = next((line[2:] for line in reversed(said) if line.startswith("+ ")), "?")
        raise UsageError(f"the test of {fl.id} failed in the SIF made from its Docker image: `{failed[:160]}` "
                         f"(exit {code}); the output: {build_log}")


def log_tail(build_log: Path) -> str:
    return " | ".join(build_log.read_text(errors="replace").strip().splitlines()[-3:])[:400]
