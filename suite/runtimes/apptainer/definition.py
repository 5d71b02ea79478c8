"""`make containers TOOL=apptainer` from a definition: containers/<stack>/<flavour>.def rendered from
container.toml and the locks (recipe), built on its pinned base (a registry) or, with BASE=debian, on a
base SIF made here from Debian's packages (`Bootstrap: localimage`; no registry needed); its %test run,
a failure named by section and line; its sha256 and metadata written beside it (describe)."""

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.instack.file_digest import file_digest
from suite.runtimes.apptainer.sif import check_sif, found_program, meta_path, runtime_version
from suite.stacks import base_images, images
from suite.stacks.images import Recipe
from suite.stacks.recipes import files_sha256


def recipe(fl) -> Recipe:
    """containers/<stack>/<flavour>.def: the shared build steps as %post, the image's test as %test."""
    lines = ["Bootstrap: docker", f"From: {fl.base.removeprefix('docker://')}", *images.header(fl), "",
             "%files", f"    containers/{fl.stack.name} {images.RECIPE}", "", "%post", "    set -eu"]
    for step in images.build_steps(fl):
        lines += [f"    {cmd}" for cmd in step.commands]
    lines += ["", "%environment", *(f'    export {k}="{v}"' for k, v in images.environment(fl).items()), "",
              "%labels", *(f"    {k} {v}" for k, v in images.labels(fl).items()), "",
              "%test", "    set -eu", *(f"    {cmd}" for cmd in images.test_commands(fl)), "",
              "%help", *(f"    {line}" for line in images.help_text(fl))]
    return Recipe(fl.stack.dir / f"{fl.name}.def", "\n".join(lines) + "\n")


def build_options() -> list[str]:
    """`--fakeroot` (what an unprivileged user builds with: /etc/subuid and /etc/subgid map them) unless
    SUITE_APPTAINER_BUILD_OPTIONS says otherwise (empty where root builds, `--remote` for a builder)."""
    return shlex.split(os.environ.get("SUITE_APPTAINER_BUILD_OPTIONS", "--fakeroot"))


def build_from_definition(fl, inputs, log=print) -> dict:
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
    made_from = {"definition": str(rendered.path.relative_to(paths.ROOT)),
                 "inputs_sha256": inputs_sha256(fl, rendered.text, base, tool)}
    if (kept := made_before(image, made_from)) is not None:
        log(f"containers: {image} was built from the same definition, stack folder, base and Apptainer before: "
            "kept (remove it to build it again)")
        return describe(tool, image, fl, base, {"built_from": made_from}, digest=kept["image_sha256"])
    partial = image.with_suffix(".sif.partial")
    log(f"containers: apptainer build {image} from {rendered.path.relative_to(paths.ROOT)} on {base['ref']}")
    started = time.monotonic()
    run_build(tool, partial, definition, rendered, log)
    os.replace(partial, image)
    meta = describe(tool, image, fl, base, {"built_from": made_from})
    log(f"containers: {image} sha256:{meta['image_sha256']} ({image.stat().st_size / 1e6:.0f} MB, built in "
        f"{time.monotonic() - started:.0f} s)")
    return meta


def inputs_sha256(fl, rendered: str, base: dict, tool: str) -> str:
    """What a definition's build is a function of: the definition as rendered, every file of the stack
    folder (%files copies it in), the base (by digest: a base made here lies at a new path each time),
    the build's options and the Apptainer that builds. The wheel folder's URL is left out: the locks'
    hashes pin what pip installs from it."""
    folder = sorted(path for path in fl.stack.dir.rglob("*") if path.is_file())
    said = {"definition": rendered, "stack_files": files_sha256(fl.stack.dir, folder),
            "base": base.get("image_sha256") or base["ref"], "options": build_options(),
            "apptainer": runtime_version(tool)}
    return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()


def made_before(image: Path, made_from: dict) -> dict | None:
    """The metadata of the SIF at image where it is whole and was built from these very inputs, else None."""
    try:
        meta = json.loads(meta_path(image).read_text())
        check_sif(image, meta, "")
    except (OSError, ValueError, UsageError):
        return None
    return meta if meta.get("built_from") == made_from and file_digest(image) == meta.get("image_sha256") else None


def describe(tool: str, image: Path, fl, base: dict, extra: dict | None = None, digest: str | None = None) -> dict:
    """Writes IMAGE.sif.sha256 and IMAGE.sif.json: the stack's facts and packages as the image holds them
    (read in one container), its sha256 (`digest` where the caller has just read it), size and the Apptainer
    that built it."""
    digest = digest or file_digest(image)
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
    made, release_date, tar_sha256 = base_images.debian_tarball(log, refresh)
    with tempfile.TemporaryDirectory(prefix="debian-base-", dir=folder) as tmp:
        os.chmod(tmp, 0o755)  # the builder (an unprivileged user) reads the tarball here, not in the cache
        tarball = Path(tmp) / "base.tar"
        shutil.copyfile(made, tarball)
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
