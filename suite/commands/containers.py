"""`suite containers render|check|build`: the stacks' container images (suite/execution/image_builds.py)."""

from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "containers"
HELP = "render, check or build the stacks' container images"


@dataclass(frozen=True)
class ContainersRequest:
    action: str
    stack: str | None = None
    flavour: str | None = None
    tool: str = "auto"
    base: str = "pinned"
    refresh_base: bool = False
    wheels: Path | None = None
    jobs: int = 1


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("action", choices=["render", "check", "build"],
        help="render: write containers/<stack>/{cpu,cuda}.{def,Dockerfile} from container.toml and the locks; "
             "check: exit 1 if any is stale; build: apptainer (or docker) build")
    add("--stack", help="only this stack (Make: STACK)")
    add("--flavour", help="only cpu or cuda (Make: FLAVOUR)")
    add("--tool", default="auto", help="auto, apptainer, docker or charliecloud (Make: TOOL)")
    add("--base", default="pinned", help="pinned: the upstream base pinned by digest in container.toml; debian: a "
        "Debian base made here from Debian's packages; docker (apptainer): the SIF made from the stack's Docker "
        "image of the same lock (Make: BASE)")
    add("--refresh-base", action="store_true",
        help="make the Debian base again rather than reuse the one made before (Make: BASE_REFRESH=1)")
    add("--wheels", type=paths.given, default=None,
        help="build from this wheel folder (make wheels) instead of filling one now (Make: WHEELS)")
    add("--jobs", type=int, default=1,
        help="images built at once after the first (which makes the base where one is made); default 1 (Make: JOBS)")


def make_request(args, case_args: list[str], argv: list[str]) -> ContainersRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(ContainersRequest, args)


def run(req: ContainersRequest) -> int:
    from suite.execution import image_builds

    if req.action == "build":
        image_builds.build(req.stack, req.flavour, req.tool, req.base, req.refresh_base, wheels=req.wheels,
                           jobs=req.jobs)
        return 0
    stale = image_builds.render(check=req.action == "check")
    for path in stale:
        print(f"{'stale' if req.action == 'check' else 'wrote'}: {path.relative_to(paths.ROOT)}")
    return 1 if stale and req.action == "check" else 0
