"""Container images of the stacks: what every container tool shares. containers/<stack>/container.toml
describes each flavour (cpu, cuda): base image pinned by digest, system packages, which lock. From it
come the build steps every image runs (venv, `pip install --require-hashes --no-deps -r <lock>`,
then post-install.sh, as the local runtime does), so the lock is the only source of versions; the
labels, environment and help an image carries; the metadata written beside a built image; and the
build itself: which flavours, the wheel folder they install from, and the runtime that builds them.

Each container tool is a runtime (suite/runtimes/<tool>.py) that owns the rest: whether it can
build here (`build_problem`), its recipe file rendered from these parts (`recipe`: an Apptainer
definition, a Dockerfile), the bases it builds on (`BASES`) and the build (`build_image`).

  python -m suite containers render | check | build [--stack S] [--flavour cpu|cuda] [--tool T]
"""

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from suite import __version__
from suite.base import paths
from suite.base.errors import UsageError
from suite.base.jsonfile import write_json_atomic
from suite.stacks import base_images, install
from suite.stacks.recipes import DESCRIPTION, Flavour, Stack, load_flavour

PREFIX = "/opt/stack"  # the stack's environment in the image: bin/python, bin/horovodrun ...
RECIPE = "/opt/recipe"  # where the build finds the stack folder's files: locks, post-install.sh, patches
FACTS = f"{PREFIX}/{install.FACTS}"
PACKAGES = f"{PREFIX}/suite-packages.json"
SYSTEM_PACKAGES = f"{PREFIX}/suite-system-packages.txt"  # dpkg's name=version of everything in the image
# With WHEELS (a build argument; for apptainer build, the environment) pip installs only from that
# wheel folder (suite/stacks/wheelhouse.py); without it, from the index as pip is configured.
USE_WHEELS = 'if [ -n "${WHEELS:-}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS"; fi'
LABEL = "org.hpc-dl-bench"


# ---- rendering: one list of build steps, written as %post and as RUN instructions ----------------

@dataclass(frozen=True)
class Step:
    """One shell of the image build: its commands, and the files of the stack folder they read. A tool with a
    layer cache copies those just before the step, so that a changed script builds again from its own step,
    and a flavour's image depends on no other flavour's files."""

    commands: list[str]
    reads: tuple[Path, ...] = ()


def build_steps(fl: Flavour) -> list[Step]:
    """The image build's steps, in order; each runs in one shell."""
    steps = []
    if fl.apt:
        steps.append(Step(["export DEBIAN_FRONTEND=noninteractive", "apt-get update",
                           f"apt-get install -y --no-install-recommends {' '.join(fl.apt)}",
                           "rm -rf /var/lib/apt/lists/*"]))
    venv = "--system-site-packages " if fl.system_site_packages else ""
    index = f"--extra-index-url {fl.pip_extra_index} " if fl.pip_extra_index else ""
    steps.append(Step([USE_WHEELS, f"{fl.python} -m venv {venv}{PREFIX}",
                       f"{PREFIX}/bin/python -m pip install --no-cache-dir --require-hashes --no-deps "
                       f"{index}-r {RECIPE}/{fl.lock}"], (fl.lock_path,)))
    if fl.stack.post_install:
        path = ":".join([f"{PREFIX}/bin", *fl.build_path, "$PATH"])
        base_env = [f"export {' '.join(f'{k}={v}' for k, v in fl.build_env.items())}"] if fl.build_env else []
        script = install.post_install_script(fl, RECIPE, PREFIX, FACTS).splitlines()
        steps.append(Step([USE_WHEELS, *base_env, f'export PATH="{path}"', "mkdir -p /tmp/stack-build",
                           "cd /tmp/stack-build", *script, "cd /", "rm -rf /tmp/stack-build"],
                          tuple(fl.stack.post_install_inputs())))
    steps.append(Step([f"{PREFIX}/bin/python -m pip list --format=json > {PACKAGES}",
                       f"{base_images.DPKG_LIST} > {SYSTEM_PACKAGES}",
                       f"if [ ! -e {FACTS} ]; then echo '{{}}' > {FACTS}; fi"]))
    return steps


def test_commands(fl: Flavour) -> list[str]:
    commands = [f'{PREFIX}/bin/python -c "{fl.smoke}"']
    if fl.check_build:
        commands.append(f"{PREFIX}/bin/horovodrun --check-build")
    return commands


def labels(fl: Flavour, base: str = "") -> dict[str, str]:
    """The image's labels; base: what the Dockerfile's LABEL writes for the base it was built on."""
    return {f"{LABEL}.stack": fl.stack.name, f"{LABEL}.flavour": fl.name, f"{LABEL}.lock": fl.lock,
            f"{LABEL}.lock_sha256": fl.lock_sha256, f"{LABEL}.recipe_sha256": fl.recipe_sha256,
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


@dataclass(frozen=True)
class Recipe:
    """A container tool's build file of a flavour, as rendered from container.toml and the locks."""

    path: Path
    text: str

    @property
    def stale(self) -> bool:
        return not self.path.exists() or self.path.read_text() != self.text


def build_dir() -> Path:
    """Where images and their metadata go; SUITE_IMAGE_DIR moves it (e.g. a cluster's shared folder)."""
    return Path(os.environ.get("SUITE_IMAGE_DIR") or paths.CONTAINERS / "build")


def write_image_meta(path: Path, fl: Flavour, image: str, image_sha256: str, tool: str, facts: dict,
                     packages: dict, base: dict, extra: dict | None = None) -> dict:
    """extra: what only one tool records (an image file's size, the tool's version ...)."""
    meta = {"stack": fl.stack.name, "flavour": fl.name, "image": image, "image_sha256": image_sha256,
            "tool": tool, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "lock": fl.lock, "lock_sha256": fl.lock_sha256, "recipe_sha256": fl.recipe_sha256,
            "base": base, "facts": facts, "packages": packages, **(extra or {})}
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


def image_provenance(meta: dict, runtime: str, image: str, flavour: str | None = None) -> dict:
    """The record's provenance of a stack run from an image with metadata (IMAGE.json, a Docker image's
    labels): the stack, its lock and packages (None: the metadata lists none, not known before launch),
    the runtime, and the image with its digest, flavour and base (its package list left in the metadata).
    flavour: the stack flavour the run picked, where the metadata names none."""
    return {
        "stack": meta["stack"],
        "stack_lock_sha256": meta["lock_sha256"],
        "stack_recipe_sha256": meta.get("recipe_sha256"),
        "stack_location": f"{image}:{stack_prefix(meta)}",
        "stack_packages": meta.get("packages"),
        "runtime": runtime,
        "image": image,
        "image_sha256": meta.get("image_sha256"),
        "image_flavour": meta.get("flavour"),
        "stack_flavour": meta.get("flavour") or flavour,
        "image_base": without_packages(meta.get("base")),
    }


def stack_prefix(meta: dict) -> str:
    """Where the stack is inside an image: PREFIX, or the metadata's `prefix` (an image not built here)."""
    return meta.get("prefix") or PREFIX


def without_packages(base):
    """An image's base as the record keeps it: its package list stays in the image's metadata."""
    return {k: v for k, v in base.items() if k != "packages"} if isinstance(base, dict) else base


def base_from_labels(labels: dict | None) -> dict:
    """The base a Docker image was built on, from its labels (a Debian base made here labels itself)."""
    prefix = f"{base_images.BASE_LABEL}."
    base = {k.removeprefix(prefix): v for k, v in (labels or {}).items()
            if k.startswith(prefix) and k != f"{prefix}spec"}
    return {"kind": base.pop("kind", "pinned"), "ref": (labels or {}).get(f"{LABEL}.base_ref"), **base}


def packages_from_pip_list(text: str) -> dict[str, str]:
    return {p["name"].lower(): p["version"] for p in json.loads(text or "[]")}


def bind_list(extra: Iterable[Path | str]) -> list[str]:
    """The checkout (case scripts, suite.instack.probe), run directories and data, each at its own path;
    folders inside another bound one and folders that do not exist are left out."""
    wanted = [paths.ROOT, paths.RUNS, paths.data_dir(), *map(Path, extra)]
    existing = sorted({p.resolve() for p in wanted if p.exists()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in existing:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return [str(p) for p in kept]


def bind_pairs(binds: Iterable[Path | str], extra: list[str], table: str) -> list[tuple[str, str]]:
    """The checkout, runs and data folders at their own paths (bind_list), and the cluster profile's
    `[TABLE] binds`, each SRC[:DST] (scratch, a site's software tree). A source that is not there is
    refused: every process would fail on it."""
    pairs = [(path, path) for path in bind_list(binds)]
    for bind in extra:
        src, _, dst = bind.partition(":")
        if not Path(src).exists():
            raise UsageError(f"[{table}] binds: {src} does not exist on this host (bind {bind})")
        pairs.append((src, dst or src))
    for src, dst in pairs:
        if "," in src or "," in dst or ":" in src or ":" in dst:
            raise UsageError(f"{table} cannot bind {src!r}: a path with a comma or colon (move the folder)")
    return pairs


# ---- building ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildInputs:
    """What a runtime's build_image gets besides the flavour."""

    base: str = "pinned"  # pinned (container.toml's digest) or another of the runtime's BASES
    refresh_base: bool = False  # make a base made here again (the first image of a build only)
    wheels: str = ""  # URL of the wheel folder pip installs from ("" = pip's own index)
