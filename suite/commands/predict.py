"""`suite predict`: fit the scaling model and print predictions with their assumptions
(suite/analysis/prediction.py)."""

from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.commands import common_args
from suite.execution.request import request_of
from suite.inputs.counts import positive_ints

NAME = "predict"
HELP = "predict throughput and efficiency at other device counts"


@dataclass(frozen=True)
class PredictRequest:
    case: str
    devices: list[int]
    cluster: str | None = None
    results_dir: Path = paths.RESULTS
    published: str | None = None
    fit_up_to: int | None = None
    fit_network: bool = False


def add_arguments(parser) -> None:
    add = parser.add_argument
    add("--case", required=True)
    add("--devices", required=True, help="device counts to predict, e.g. 8,16,32,64")
    common_args.cluster(parser, "use this cluster's records and its profile's interconnect figures")
    common_args.results_dir(parser, make=False)
    add("--published", metavar="SOURCE", help="fit the case's published figures whose source contains SOURCE")
    add("--fit-up-to", type=int, default=None, help="fit only measurements at or below this many devices")
    add("--fit-network", action="store_true", help="fit bandwidth and latency even when the profile gives them")


def make_request(args, case_args: list[str], argv: list[str]) -> PredictRequest:
    common_args.no_case_args(NAME, case_args)
    return request_of(PredictRequest, args, devices=positive_ints(args.devices, "--devices"))


def run(req: PredictRequest) -> int:
    from suite.analysis.prediction import predict
    from suite.execution.clusters import load_cluster, names_a_file

    # A profile given by its path: the records name its cluster by the file's name.
    by_path = load_cluster(req.cluster) if req.cluster and names_a_file(req.cluster) else None
    print(predict(req.case, req.devices, req.results_dir, by_path.name if by_path else req.cluster, req.published,
                  req.fit_up_to, req.fit_network,
                  profile_interconnect=lambda cluster: (by_path or load_cluster(cluster)).interconnect))
    return 0
