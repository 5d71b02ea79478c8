"""`suite data`: prepare a case's dataset with the case's data script, inside the case's local stack."""

from dataclasses import dataclass, field
from pathlib import Path

from suite.base import paths
from suite.commands import common_args
from suite.execution.datasets import prepare_dataset
from suite.execution.request import request_of

NAME = "data"
HELP = "prepare a case's dataset (download, pack, or generate with --synthetic)"


@dataclass(frozen=True)
class DataRequest:
    case: str
    data_dir: Path | None = None
    cluster: str | None = None
    synthetic: bool = False
    src: str | None = None
    case_args: list[str] = field(default_factory=list)


def add_arguments(parser) -> None:
    parser.add_argument("--case", required=True, help="case folder under cases/ (Make: CASE)")
    parser.add_argument("--data-dir", type=paths.given, default=None,
                        help="default: the cluster profile's data_dir, else $DATA_DIR, else data/ in the checkout")
    common_args.cluster(parser, "cluster profile whose data_dir to use (Make: CLUSTER)")
    parser.add_argument("--synthetic", action="store_true",
                        help="generate a small dataset in the real format (Make: SYNTHETIC=1)")
    parser.add_argument("--src", default=None, help="source to pack from, where the case supports it (Make: SRC)")


def make_request(args, case_args: list[str], argv: list[str]) -> DataRequest:
    return request_of(DataRequest, args, case_args=list(case_args))


def run(req: DataRequest) -> int:
    extra = (["--synthetic"] if req.synthetic else []) + (["--src", req.src] if req.src else [])
    return prepare_dataset(req.case, req.data_dir, req.cluster, [*extra, *req.case_args])
