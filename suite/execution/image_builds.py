"""Render and build the stacks' images with the runtimes that build images (`suite containers`): each
runtime plugin renders its own recipe of a flavour (suite/stacks/images.py holds what they share)."""

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.stacks import wheelhouse
from suite.stacks.images import BuildInputs, Recipe, build_dir
from suite.stacks.recipes import DESCRIPTION, FLAVOURS, Flavour, described_flavours, load_flavour, load_stack


def image_runtimes() -> list:
    """The runtimes that build images, in the order `--tool auto` tries them."""
    found = [rt for rt in plugins.load_all("runtimes") if rt.IMAGES]
    return sorted(found, key=lambda rt: (rt.BUILD_PREFERENCE, rt.name))


def recipes(fl: Flavour) -> list[Recipe]:
    return [recipe for rt in image_runtimes() if (recipe := rt.recipe(fl)) is not None]


def render(check: bool = False) -> list[Path]:
    """Writes every container tool's recipe of every flavour; with check, writes nothing and returns
    the stale ones."""
    stale = []
    for fl in described_flavours():
        for recipe in recipes(fl):
            if recipe.stale:
                stale.append(recipe.path)
                if not check:
                    recipe.path.write_text(recipe.text)
    return stale


# ---- images: where they are, what is recorded about them ---------------------------------------

def builder(tool: str, base: str, flavours: list[Flavour]):
    """The runtime that builds the images (tool: auto or a runtime's name), after its own checks of
    each flavour on that base; UsageError naming what is missing where none can."""
    builders = image_runtimes()
    names = [rt.name for rt in builders]
    if tool not in ("auto", *names):
        raise UsageError(f"--tool must be auto or one of {', '.join(names)}, got '{tool}'")
    bases = sorted({b for rt in builders for b in rt.BASES}, key=lambda b: (b != "pinned", b))
    if base not in bases:
        raise UsageError(f"BASE must be one of {', '.join(bases)}, got '{base}'")
    asked = [rt for rt in builders if tool in ("auto", rt.name)]
    able = [rt for rt in asked if base in rt.BASES]
    if not able:
        able_elsewhere = " or ".join(f"TOOL={rt.name}" for rt in builders if base in rt.BASES)
        raise UsageError(f"BASE={base} builds with {able_elsewhere}, not TOOL={tool}")
    for fl in flavours:
        for rt in able:
            rt.check_build(fl, base)
    problems = {rt.name: rt.build_problem() for rt in able}
    ready = [rt for rt in able if problems[rt.name] is None]
    if ready:
        return ready[0]
    said = ", ".join(f"{rt.name}: {problems[rt.name] if rt in able else 'not asked for'}" for rt in builders)
    raise UsageError(f"cannot build containers: needs {' or '.join(rt.IMAGES for rt in able)}; {said}")


def check_buildable(fl: Flavour) -> None:
    if not fl.base_pinned:
        raise UsageError(f"{fl.id}: base image {fl.base} is not pinned to a verified digest "
                         f"(placeholder in containers/{fl.stack.name}/{DESCRIPTION}); pin it, then render")
    stale = [recipe.path for recipe in recipes(fl) if recipe.stale]
    if stale:
        raise UsageError(f"{fl.id}: {stale[0].name} does not match {DESCRIPTION} and the lock; "
                         "run `python -m suite containers render`")


def build(stack: str | None, flavour: str | None, tool: str, base: str = "pinned", refresh_base: bool = False,
          log=print, wheels: Path | None = None, jobs: int = 1) -> list[dict]:
    """Builds the selected images from a wheel folder (`wheels`, filled before by `make wheels`; else
    one filled now), `jobs` at a time; one named explicitly with an unpinned base is refused, a selection
    of several skips such images with a warning."""
    if jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, got {jobs}")
    if stack is not None:
        load_flavour(load_stack(stack), flavour or "cpu")  # names a bad stack or flavour in one line
    elif flavour is not None and flavour not in FLAVOURS:
        raise UsageError(f"unknown flavour '{flavour}' (known: {', '.join(FLAVOURS)})")
    if base != "pinned" and flavour is None:
        flavour = "cpu"  # bases made here are Debian's, without CUDA
    flavours = [fl for fl in described_flavours()
                if (stack is None or fl.stack.name == stack) and (flavour is None or fl.name == flavour)]
    if len(flavours) > 1:
        for fl in [fl for fl in flavours if not fl.base_pinned]:
            log(f"containers: skipping {fl.id}: its base image has no pinned digest yet ({fl.base})")
            flavours.remove(fl)
    for fl in flavours:
        check_buildable(fl)
    chosen = builder(tool, base, flavours)
    # the wheel folder, the images and their metadata go there, some only once a long build is done
    paths.refuse_unwritable(build_dir(), "the images' folder (SUITE_IMAGE_DIR)")
    if base == "docker":  # a SIF made from the Docker image, which installed the packages: no wheel folder
        return built_in_turns(chosen, flavours, BuildInputs(base), jobs, log)
    if wheels is None:
        wheels = build_dir() / "wheels"
        for fl in flavours:
            wheelhouse.fill(wheels, fl.locks(), fl.pip_extra_index, log, needs=fl.extra_index_builds())
    with wheelhouse.served(Path(wheels)) as url:
        return built_in_turns(chosen, flavours, BuildInputs(base, refresh_base, url), jobs, log)


def built_in_turns(chosen, flavours: list[Flavour], first: BuildInputs, jobs: int, log) -> list[dict]:
    """The first image alone (where the base is made, it is made then, once), then the others `jobs` at a
    time, those that compile a package from source (a post-install.sh: the longest builds) first, their log
    lines led by the flavour's id; the metadata in the order of flavours."""
    if not flavours:
        return []
    made = [chosen.build_image(flavours[0], first, log)]
    rest, lock = replace(first, refresh_base=False), threading.Lock()

    def one(fl: Flavour) -> dict:
        def said(line: str) -> None:
            with lock:
                log(f"[{fl.id}] {line}" if jobs > 1 else line)

        return chosen.build_image(fl, rest, said)

    later = sorted(flavours[1:], key=lambda fl: fl.stack.post_install is None)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        built = dict(zip((fl.id for fl in later), pool.map(one, later)))
    return made + [built[fl.id] for fl in flavours[1:]]
