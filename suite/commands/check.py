"""`suite check [--cluster NAME] [--only PATTERN]` (make check-site): the acceptance test of a port. Every
path the profile (or this host) offers, each case at its [tiny] sizes through each runtime and launcher, in
one table (suite/execution/site_runner.py runs them). Exit 0: every path that ran passed; 1: an available
path failed; 3: no path was available here, so nothing was checked; 130: interrupted."""

from dataclasses import dataclass
from pathlib import Path

from suite.analysis import site_check
from suite.base import paths
from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution.request import add_site_env_options, request_of
from suite.execution.site_paths import SiteEnv
from suite.execution.site_runner import PATH_TIMEOUT_S, check_site

NAME = "check"
HELP = ("the acceptance test of a port: every path the profile (or this host) offers, each case at its tiny sizes "
        "through each runtime and launcher, in one table (ok, failed, not available here, and why); exit 1 when an "
        f"available path failed, {site_check.EXIT_NOTHING_CHECKED} when none was available")


@dataclass(frozen=True)
class CheckRequest:
    cluster: str | None = None
    only: list[str] | None = None
    timeout: float = PATH_TIMEOUT_S
    results_dir: Path = paths.RESULTS
    runs_dir: Path = paths.RUNS
    modules: str | None = None
    source: str | None = None
    python: str | None = None


def add_arguments(parser) -> None:
    common_args.cluster(parser, "cluster profile hostfiles/NAME.toml or a PATH.toml (default: this machine) "
                                "(Make: CLUSTER)")
    parser.add_argument("--only", action="append", default=None, metavar="PATTERN",
                        help="only the paths whose case/runtime/launcher contains PATTERN, e.g. pytorch-ddp/local/ "
                             "or /docker/ (repeatable) (Make: ONLY)")
    parser.add_argument("--timeout", type=float, default=PATH_TIMEOUT_S, metavar="SECONDS",
                        help=f"limit of each path, its stack's first install included (default: {PATH_TIMEOUT_S})")
    common_args.results_dir(parser, "the table goes beside it, in ../site-checks/ (default: reports/results)")
    common_args.runs_dir(parser, "where each check's folder goes: the paths' records and run folders (default: runs)")
    add_site_env_options(parser.add_argument, "the site's environment of the modules paths")


def make_request(args, case_args: list[str], argv: list[str]) -> CheckRequest:
    common_args.no_case_args(NAME, case_args)
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    # the table is written once every path ran, maybe an hour later: where it goes is checked first
    paths.refuse_unwritable(site_check.folder_of(args.results_dir), "the table, beside --results-dir (Make: "
                            "RESULTS),")
    paths.refuse_unwritable(args.runs_dir, "--runs-dir (Make: RUNS)")
    return request_of(CheckRequest, args)


def run(req: CheckRequest) -> int:
    return check_site(req.cluster, req.only, req.results_dir, req.runs_dir, req.timeout,
                      SiteEnv(req.modules, req.source, req.python))
