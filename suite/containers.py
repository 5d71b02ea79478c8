"""Container images of the stacks. containers/<stack>/container.toml describes each flavour (cpu,
cuda): base image pinned by digest, system packages, which lock. From it this module renders an
Apptainer definition and a Dockerfile per flavour that build the stack exactly as the local runtime
does (venv, `pip install --require-hashes --no-deps -r <lock>`, then post-install.sh), so the lock is
the only source of versions. It also builds the images and finds them for the container runtimes.

  python -m suite containers render | check | build [--stack S] [--flavour cpu|cuda] [--tool T]
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from suite import __version__, container_base, paths, plugins
from suite.errors import UsageError
from suite.jsonfile import write_json_atomic
from suite.stacks import Stack, load_stack

FLAVOURS = ("cpu", "cuda")
DESCRIPTION = "container.toml"
PREFIX = "/opt/stack"  # the stack's environment in the image: bin/python, bin/horovodrun ...
RECIPE = "/opt/recipe"  # the stack folder copied in: locks, post-install.sh, patches
FACTS = f"{PREFIX}/suite-facts.json"
PACKAGES = f"{PREFIX}/suite-packages.json"
SYSTEM_PACKAGES = f"{PREFIX}/suite-system-packages.txt"  # dpkg's name=version of everything in the image
# With WHEELS (a build argument; for apptainer build, the environment) pip installs only from that
# wheel folder (suite.container_base); without it, from the index as pip is configured.
USE_WHEELS = 'if [ -n "${WHEELS:-}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS"; fi'
LABEL = "org.hpc-dl-bench"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
KEYS = {"base", "base_source", "python", "lock", "pip_extra_index", "apt", "build_env", "build_path", "prepare",
        "smoke", "check_build", "system_site_packages", "example_case"}


@dataclass(frozen=True)
class Flavour:
    """One image of a stack, as container.toml describes it."""

    stack: Stack
    name: str
    base: str
    base_source: str
    python: str
    lock: str  # relative to the stack folder
    smoke: str
    example_case: str
    pip_extra_index: str = ""  # where wheels that are not on PyPI are found (torch's CPU build)
    apt: tuple[str, ...] = ()
    build_env: dict = field(default_factory=dict)
    build_path: tuple[str, ...] = ()
    prepare: tuple[str, ...] = ()
    check_build: bool = False
    system_site_packages: bool = False

    @property
    def id(self) -> str:
        return f"{self.stack.name}/{self.name}"

    @property
    def lock_path(self) -> Path:
        return self.stack.dir / self.lock

    @property
    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock_path.read_bytes()).hexdigest()

    @property
    def base_pinned(self) -> bool:
        return bool(DIGEST.search(self.base))

    @property
    def definition(self) -> Path:
        return self.stack.dir / f"{self.name}.def"

    @property
    def dockerfile(self) -> Path:
        return self.stack.dir / f"{self.name}.Dockerfile"


def load_flavour(stack: Stack, name: str) -> Flavour:
    path = stack.dir / DESCRIPTION
    if name not in FLAVOURS:
        raise UsageError(f"unknown container flavour '{name}' (known: {', '.join(FLAVOURS)})")
    if not path.exists():
        raise UsageError(f"stack {stack.name} has no container description ({path})")
    spec = tomllib.loads(path.read_text())
    merged = {k: v for k, v in spec.items() if not isinstance(v, dict)} | spec.get(name, {})
    unknown = set(merged) - KEYS
    if unknown or name not in spec:
        raise UsageError(f"{path}: " + (f"unknown keys {sorted(unknown)}" if unknown else f"no [{name}] table"))
    if "@sha256:" not in merged.get("base", ""):
        raise UsageError(f"{path} [{name}]: base must be pinned by digest (IMAGE@sha256:...), got {merged.get('base')!r}")
    if '"' in merged.get("smoke", ""):
        raise UsageError(f"{path} [{name}]: smoke must not contain double quotes (it is run as python -c \"...\")")
    tuples = {k: tuple(merged[k]) for k in ("apt", "build_path", "prepare") if k in merged}
    return Flavour(stack=stack, name=name, **{**merged, **tuples})


def described_flavours() -> list[Flavour]:
    stacks = sorted(p.parent.name for p in paths.CONTAINERS.glob(f"*/{DESCRIPTION}"))
    return [load_flavour(load_stack(s), f) for s in stacks for f in FLAVOURS]


# ---- rendering: one list of build steps, written as %post and as RUN instructions ----------------

def build_steps(fl: Flavour) -> list[list[str]]:
    """Shell steps of the image build; each inner list runs in one shell."""
    steps = []
    if fl.apt:
        steps.append(["export DEBIAN_FRONTEND=noninteractive", "apt-get update",
                      f"apt-get install -y --no-install-recommends {' '.join(fl.apt)}",
                      "rm -rf /var/lib/apt/lists/*"])
    venv = "--system-site-packages " if fl.system_site_packages else ""
    index = f"--extra-index-url {fl.pip_extra_index} " if fl.pip_extra_index else ""
    steps.append([USE_WHEELS, f"{fl.python} -m venv {venv}{PREFIX}",
                  f"{PREFIX}/bin/python -m pip install --no-cache-dir --require-hashes --no-deps {index}-r {RECIPE}/{fl.lock}"])
    if fl.stack.post_install:
        path = ":".join([f"{PREFIX}/bin", *fl.build_path, "$PATH"])
        env = " ".join(f"{k}={v}" for k, v in {"STACK_DIR": RECIPE, "STACK_PREFIX": PREFIX,
                                                 "SUITE_FACTS_FILE": FACTS, **fl.build_env}.items())
        steps.append([USE_WHEELS, "mkdir -p /tmp/stack-build", "cd /tmp/stack-build", *fl.prepare,
                      f'env {env} PATH="{path}" bash {RECIPE}/post-install.sh', "cd /", "rm -rf /tmp/stack-build"])
    steps.append([f"{PREFIX}/bin/python -m pip list --format=json > {PACKAGES}",
                  f"{container_base.DPKG_LIST} > {SYSTEM_PACKAGES}",
                  f"if [ ! -e {FACTS} ]; then echo '{{}}' > {FACTS}; fi"])
    return steps


def test_commands(fl: Flavour) -> list[str]:
    commands = [f'{PREFIX}/bin/python -c "{fl.smoke}"']
    if fl.check_build:
        commands.append(f"{PREFIX}/bin/horovodrun --check-build")
    return commands


def labels(fl: Flavour, base: str = "") -> dict[str, str]:
    """The image's labels; base: what the Dockerfile's LABEL writes for the base it was built on."""
    return {f"{LABEL}.stack": fl.stack.name, f"{LABEL}.flavour": fl.name, f"{LABEL}.lock": fl.lock,
            f"{LABEL}.lock_sha256": fl.lock_sha256, f"{LABEL}.recipe_sha256": fl.stack.recipe_sha256,
            f"{LABEL}.suite_version": __version__, f"{LABEL}.base_ref": base or fl.base.removeprefix("docker://")}


def environment(fl: Flavour) -> dict[str, str]:
    # Apptainer binds $HOME: the user's ~/.local packages must not shadow the stack's.
    return {"PATH": f"{PREFIX}/bin:$PATH", "PYTHONNOUSERSITE": "1"}


def help_text(fl: Flavour) -> list[str]:
    nv = "--nv " if fl.name == "cuda" else ""
    return [
        f"hpc-dl-bench stack {fl.stack.name}, flavour {fl.name}: the environment of",
        f"containers/{fl.stack.name}/{fl.lock} in {PREFIX} (python and the stack's tools on PATH).",
        "Run a case with the suite, in a checkout that every node mounts at the same path:",
        f"    make run CASE={fl.example_case} RUNTIME=apptainer NODES=1",
        "(images are looked up in containers/build/, or set SUITE_IMAGE=path/to/image.sif).",
        "By hand, in the checkout:",
        f"    PYTHONPATH=$PWD apptainer exec {nv}--bind $PWD IMAGE.sif python cases/{fl.example_case}/train.py --help",
    ]


def header(fl: Flavour) -> list[str]:
    return [f"# Generated by `python -m suite containers render` from containers/{fl.stack.name}/{DESCRIPTION}",
            f"# and {fl.lock}: edit those, not this file. Base image: {fl.base_source}."]


def render_definition(fl: Flavour) -> str:
    lines = ["Bootstrap: docker", f"From: {fl.base.removeprefix('docker://')}", *header(fl), "",
             "%files", f"    containers/{fl.stack.name} {RECIPE}", "", "%post", "    set -eu"]
    for step in build_steps(fl):
        lines += [f"    {cmd}" for cmd in step]
    lines += ["", "%environment", *(f'    export {k}="{v}"' for k, v in environment(fl).items()), "",
              "%labels", *(f"    {k} {v}" for k, v in labels(fl).items()), "",
              "%test", "    set -eu", *(f"    {cmd}" for cmd in test_commands(fl)), "",
              "%help", *(f"    {line}" for line in help_text(fl))]
    return "\n".join(lines) + "\n"


def render_dockerfile(fl: Flavour) -> str:
    lines = ["# BASE: the pinned upstream image by default; `make containers BASE=debian` passes a Debian",
             "# base made from Debian's packages. WHEELS: the wheel folder's URL pip installs from.",
             f"ARG BASE={fl.base.removeprefix('docker://')}", "FROM ${BASE}", *header(fl),
             "# Build in a context holding containers/ (python -m suite containers build --tool docker does).",
             *(f"# {line}" for line in help_text(fl)), "", "ARG BASE", "ARG WHEELS",
             *(f'LABEL {k}="{v}"' for k, v in labels(fl, "${BASE}").items()),
             f"COPY containers/{fl.stack.name} {RECIPE}"]
    for step in build_steps(fl):
        lines.append("RUN " + " && \\\n    ".join(step))
    lines.append("ENV " + " ".join(f'{k}="{v.replace("$PATH", "${PATH}")}"' for k, v in environment(fl).items()))
    lines.append("# the definition's %test, run at build time")
    lines.append("RUN " + " && \\\n    ".join(test_commands(fl)))
    return "\n".join(lines) + "\n"


def render(check: bool = False) -> list[Path]:
    """Writes every definition and Dockerfile; with check, writes nothing and returns the stale ones."""
    stale = []
    for fl in described_flavours():
        for path, text in ((fl.definition, render_definition(fl)), (fl.dockerfile, render_dockerfile(fl))):
            if not path.exists() or path.read_text() != text:
                stale.append(path)
                if not check:
                    path.write_text(text)
    return stale


# ---- images: where they are, what is recorded about them ---------------------------------------

def host_gpus() -> int:
    """NVIDIA GPUs of this host, as nvidia-smi lists them (0 without a driver)."""
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def pick_flavour(gpus: int) -> str:
    name = os.environ.get("SUITE_CONTAINER_FLAVOUR") or ("cuda" if gpus else "cpu")
    if name not in FLAVOURS:
        raise UsageError(f"SUITE_CONTAINER_FLAVOUR must be one of {', '.join(FLAVOURS)}, got '{name}'")
    return name


def build_dir() -> Path:
    """Where images and their metadata go; SUITE_IMAGE_DIR moves it (e.g. a cluster's shared folder)."""
    return Path(os.environ.get("SUITE_IMAGE_DIR") or paths.CONTAINERS / "build")


def sif_path(stack: str, flavour: str) -> Path:
    return Path(os.environ.get("SUITE_IMAGE") or build_dir() / f"{stack}-{flavour}.sif")


def docker_tag(fl: Flavour, base_kind: str = "pinned") -> str:
    suffix = "" if base_kind == "pinned" else f"-{base_kind}"
    return f"hpc-dl-bench-{fl.stack.name}:{fl.name}-{fl.lock_sha256[:12]}{suffix}"


def meta_path(image: Path | str, stack: str = "", flavour: str = "") -> Path:
    """Beside a .sif: IMAGE.sif.json; for a docker tag: <build dir>/<stack>-<flavour>.docker.json."""
    if str(image).endswith(".sif"):
        return Path(f"{image}.json")
    return build_dir() / f"{stack}-{flavour}.docker.json"


def write_image_meta(path: Path, fl: Flavour, image: str, image_sha256: str, tool: str, facts: dict,
                     packages: dict, base: dict) -> dict:
    meta = {"stack": fl.stack.name, "flavour": fl.name, "image": image, "image_sha256": image_sha256,
            "tool": tool, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "lock": fl.lock, "lock_sha256": fl.lock_sha256, "recipe_sha256": fl.stack.recipe_sha256,
            "base": base, "facts": facts, "packages": packages}
    write_json_atomic(path, meta)
    return meta


def refuse_stale_image(stack: Stack, flavour: str, image_lock_sha256: str | None, log) -> None:
    """An image built from another lock than the checkout's is refused: its figures would be credited
    to the wrong stack. SUITE_ALLOW_STALE_IMAGE=1 runs it anyway (the record states the image's lock)."""
    current = load_flavour(stack, flavour).lock_sha256 if (stack.dir / DESCRIPTION).exists() else None
    if not current or image_lock_sha256 == current:
        return
    message = (f"the {flavour} image of {stack.name} was built from another lock than the checkout's "
               f"(image {(image_lock_sha256 or '?')[:12]}, checkout {current[:12]}): rebuild it with "
               f"`make containers STACK={stack.name} FLAVOUR={flavour}`")
    if os.environ.get("SUITE_ALLOW_STALE_IMAGE") != "1":
        raise UsageError(message + " (or set SUITE_ALLOW_STALE_IMAGE=1)")
    log(f"warning: {message}")


def read_image_meta(path: Path, how_to_build: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        raise UsageError(f"no image metadata at {path} (written by `{how_to_build}`)") from None


def packages_from_pip_list(text: str) -> dict[str, str]:
    return {p["name"].lower(): p["version"] for p in json.loads(text or "[]")}


def bind_list(extra: Iterable[Path | str]) -> list[str]:
    """The checkout (case scripts, suite.probe), run directories and data, each at its own path;
    folders inside another bound one and folders that do not exist are left out."""
    wanted = [paths.ROOT, paths.RUNS, paths.data_dir(), *map(Path, extra)]
    existing = sorted({p.resolve() for p in wanted if p.exists()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in existing:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return [str(p) for p in kept]


# ---- building ------------------------------------------------------------------------------------

def available_tool(wanted: str) -> str:
    """apptainer or docker, whichever can build here (wanted: auto, apptainer, docker)."""
    if wanted not in ("auto", "apptainer", "docker"):
        raise UsageError(f"--tool must be auto, apptainer or docker, got '{wanted}'")
    if wanted in ("auto", "apptainer") and shutil.which("apptainer"):
        return "apptainer"
    why_not = docker_engine_problem() if wanted in ("auto", "docker") else "not asked for"
    if why_not is None:
        return "docker"
    asked = {"auto": "apptainer or a Docker engine", "apptainer": "apptainer", "docker": "a Docker engine"}[wanted]
    raise UsageError(f"cannot build containers: needs {asked}; apptainer: "
                     f"{'on PATH' if shutil.which('apptainer') else 'not on PATH'}, docker: {why_not}")


def docker_engine_problem() -> str | None:
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


def check_buildable(fl: Flavour) -> None:
    if not fl.base_pinned:
        raise UsageError(f"{fl.id}: base image {fl.base} is not pinned to a verified digest "
                         f"(placeholder in containers/{fl.stack.name}/{DESCRIPTION}); pin it, then render")
    stale = [p for p in (fl.definition, fl.dockerfile)
             if not p.exists() or p.read_text() != (render_definition(fl) if p.suffix == ".def" else render_dockerfile(fl))]
    if stale:
        raise UsageError(f"{fl.id}: {stale[0].name} does not match {DESCRIPTION} and the lock; run `python -m suite containers render`")


@dataclass(frozen=True)
class BuildInputs:
    """What a runtime's build_image gets besides the flavour."""

    base_ref: str  # the image the build starts from
    base: dict  # its provenance (suite.container_base)
    wheels: str = ""  # URL of the wheel folder pip installs from ("" = pip's own index)


def build(stack: str | None, flavour: str | None, tool: str, base: str = "pinned", refresh_base: bool = False,
          log=print) -> list[dict]:
    """Builds the selected images; one named explicitly with an unpinned base is refused, a selection
    of several skips such images with a warning."""
    if stack is not None:
        load_flavour(load_stack(stack), flavour or "cpu")  # names a bad stack or flavour in one line
    elif flavour is not None and flavour not in FLAVOURS:
        raise UsageError(f"unknown container flavour '{flavour}' (known: {', '.join(FLAVOURS)})")
    if base == "debian" and flavour is None:
        flavour = "cpu"
    flavours = [fl for fl in described_flavours()
                if (stack is None or fl.stack.name == stack) and (flavour is None or fl.name == flavour)]
    if len(flavours) > 1:
        for fl in [fl for fl in flavours if not fl.base_pinned]:
            log(f"containers: skipping {fl.id}: its base image has no pinned digest yet ({fl.base})")
            flavours.remove(fl)
    for fl in flavours:
        container_base.check_base(base, fl.name)
        check_buildable(fl)
    tool = available_tool(tool)
    if base == "debian" and tool != "docker":
        raise UsageError("BASE=debian builds with a Docker engine (TOOL=docker); for a SIF, convert the built "
                         "image: apptainer build IMAGE.sif docker-daemon://TAG")
    builder = plugins.load("runtimes", tool)  # the runtime that runs an image builds it
    made = container_base.debian_base(docker_client(), log, refresh_base) if base == "debian" else None
    wheels = build_dir() / "wheels"
    for fl in flavours:
        container_base.fill_wheel_folder(wheels, locks_of(fl), fl.pip_extra_index, log)
    with container_base.served(wheels) as url:
        return [builder.build_image(fl, BuildInputs(made["ref"], made, url) if made else
                                    BuildInputs(fl.base.removeprefix("docker://"), container_base.pinned_base(fl.base), url),
                                    log)
                for fl in flavours]


def locks_of(fl: Flavour) -> list[tuple[Path, bool]]:
    """The flavour's lock (wheels), then the stack's other locks (sdists its post-install builds)."""
    others = [p for p in sorted(fl.stack.dir.glob("*.lock")) if p.name != "requirements.lock"]
    return [(fl.lock_path, False), *((p, True) for p in others)]


def docker_client(timeout: int = 60):
    import docker

    return docker.from_env(timeout=timeout)
