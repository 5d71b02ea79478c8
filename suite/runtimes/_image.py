"""The skeleton every image runtime shares (a helper, not a plugin): `ImageRuntime.prepare` finds the
image and reads its metadata, checks it holds the run's stack and the checkout's lock, sets the working
folder and the environment, and builds the record's provenance (suite.stacks.images.image_provenance),
once for Apptainer, Charliecloud, Docker, Podman and pyxis. A runtime is a subclass that keeps only
what is its own, then `prepare = ItsClass().prepare` (docs/plugins.md, "An image runtime"):

- `locate(want, flavour, setup) -> Where`: where its image and the metadata beside it are (required);
- `command(run, log) -> Command`: the prefix every program of the stack gets (its GPU and bind flags)
  and what it adds to the environment and the provenance (required);
- `start(want, log)`: what it reads before the image (its program, its profile table, the folders to
  bind), refusing what it cannot run with; what it returns reaches the other hooks as `setup`;
- `read_meta(where, setup)`: the metadata where it is not a file (Docker: the image's labels).

Its build or import step (build_image, recipe ...) stays module-level, as the Runtime contract has it."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.plan import StackEnv, StackRequest
from suite.inputs.host_gpus import host_gpus, pick_flavour
from suite.stacks import images


@dataclass(frozen=True)
class Where:
    """Where a runtime looks for a stack's image (its `locate`)."""

    image: str | None  # what the command line names (a file, a tag, an enroot reference); None: the metadata's "image"
    meta: Path | None  # the metadata `make containers` wrote (IMAGE.json, <stack>-<flavour>.docker.json)
    hint: str  # how to make the image, as refusals say it
    missing: str | None = None  # why the image is not there (refused; warned of in a dry run that plans ahead)
    named: str = ""  # how a refusal names the image (default: "image IMAGE")


@dataclass(frozen=True)
class Run:
    """What the skeleton hands a runtime's `command`: the image found and checked, and the run's folders."""

    want: StackRequest
    flavour: str
    gpus: int | None  # the first host's GPUs (None: not counted here; COUNTS_GPUS counts them)
    image: str
    meta: dict
    hint: str
    workdir: str  # the runs folder: where the processes start (the cases use absolute paths)
    env: dict  # what the suite sets inside the container (PYTHONPATH to the checkout)
    setup: Any  # what the runtime's `start` returned


@dataclass(frozen=True)
class Command:
    """A runtime's own part of a prepared stack."""

    prefix: tuple[str, ...]  # what every program of the stack is started with
    env: dict = field(default_factory=dict)  # added to the suite's (charliecloud: USER)
    provenance: dict = field(default_factory=dict)  # added to the record's (apptainer: runtime_version)
    meta: dict = field(default_factory=dict)  # read from the image itself after the checks (docker: packages)
    tool: str = ""  # how the log line names the program (default: the runtime's name)
    note: str = ""  # the log line's end (", apptainer 1.4.5")


class ImageRuntime:
    """Runs a stack from a container image; subclass it, set `name` and define locate and command."""

    name = ""  # the runtime's name, as RUNTIME= and the record's provenance.runtime give it
    COUNTS_GPUS = False  # passes the host's GPUs in: counts this host's where the run does not say
    PLANS_AHEAD = False  # a dry run goes on without the image (it may be on the cluster only), with a warning

    def start(self, want: StackRequest, log) -> Any:
        return None

    def locate(self, want: StackRequest, flavour: str, setup) -> Where:
        raise NotImplementedError(f"runtime {self.name} defines no locate")

    def read_meta(self, where: Where, setup) -> dict:
        return images.read_image_meta(where.meta, where.hint)

    def command(self, run: Run, log) -> Command:
        raise NotImplementedError(f"runtime {self.name} defines no command")

    def prepare(self, want: StackRequest, log=print) -> StackEnv:
        stack = want.stack
        setup = self.start(want, log)
        gpus = host_gpus() if want.gpus is None and self.COUNTS_GPUS else want.gpus
        flavour = pick_flavour(want.flavour, gpus)
        where = self.locate(want, flavour, setup)
        meta = self.checked_meta(want, flavour, where, setup, log)
        image = where.image or meta["image"]
        workdir = str(Path(want.binds[0]).resolve()) if want.binds else str(paths.RUNS)
        env = {"PYTHONPATH": str(paths.ROOT)}
        own = self.command(Run(want, flavour, gpus, image, meta, where.hint, workdir, env, setup), log)
        meta = {**meta, **own.meta}
        provenance = {**images.image_provenance(meta, self.name, image, flavour), **own.provenance}
        digest = provenance.get("image_sha256")
        log(f"stack {stack.name}: {own.tool or self.name} image {image} "
            f"({flavour}{f', sha256:{digest[:12]}' if digest else ''}){own.note}")
        return StackEnv(runtime=self.name, bin_dir=f"{images.stack_prefix(meta)}/bin", prefix=own.prefix,
                        env={**env, **own.env}, facts=meta.get("facts", {}), provenance=provenance)

    def checked_meta(self, want: StackRequest, flavour: str, where: Where, setup, log) -> dict:
        """The image's metadata, refused where the image is missing or holds another stack or lock (what
        prepare checks before the runtime's own command, and what a runtime's doctor line may check)."""
        stack = want.stack
        meta = self.metadata(want, flavour, where, setup, log)
        if meta.get("stack") != stack.name:
            named = where.named or f"image {where.image or meta['image']}"
            raise UsageError(f"{named} holds stack {meta.get('stack')!r}, not {stack.name}")
        images.refuse_stale_image(stack, flavour, meta.get("lock_sha256"), log)
        return meta

    def metadata(self, want: StackRequest, flavour: str, where: Where, setup, log) -> dict:
        """The image's metadata; a dry run of a runtime that plans ahead goes on without it (the stack
        and the checkout's lock, packages not known) where the image is not on this machine."""
        try:
            if where.missing:
                raise UsageError(where.missing)
            return self.read_meta(where, setup)
        except UsageError as exc:
            if want.install or not self.PLANS_AHEAD:
                raise
            log(f"warning: on this machine: {exc}")
            return {"stack": want.stack.name, "flavour": flavour,
                    "lock_sha256": images.load_flavour(want.stack, flavour).lock_sha256}
