"""Command line: python -m suite COMMAND ... (`python -m suite --help` lists the commands)."""

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins, request
from suite.execution.clusters import load_cluster
from suite.inputs.cases import known_cases, load_case
from suite.inputs.host_gpus import FLAVOURS
from suite.instack.case_options import build_parser

RUN_EPILOG = """Case options go after '--' (Make: ARGS) and are checked against the case before anything
starts, e.g.  python -m suite run --case pytorch-synthetic --gpus-per-node 2 -- --image-size 64 --batch-size 8
"""


COMPARE_EPILOG = """A selection picks records of a folder by the fields of `suite query` (quote it in a shell):
  python -m suite compare 'reports/results?case=pytorch-ddp&cluster=jsc&until=2026-10-31' \\
                          'reports/results?case=pytorch-ddp&cluster=jsc&since=2026-11-01'
fields: case, cluster, stack, fingerprint (first characters), devices (8 or 1,2,4), since, until (UTC dates)
"""


def case_options_help() -> str:
    sections = []
    for name in known_cases():
        usage = build_parser(load_case(name).spec).format_help()
        sections.append(f"case {name}:\n" + usage.split("\n\n", 1)[-1].split("options:\n", 1)[-1])
    return RUN_EPILOG + "\n" + "\n".join(sections)


def build_cli() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m suite",
                                     description="Distributed deep-learning training benchmarks for HPC clusters.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a case and write a result record", epilog=case_options_help(),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    request.add_run_options(run, plugins.available("runtimes"), plugins.available("schedulers"))

    frameworks = sub.add_parser(
        "compare-frameworks", help="run every case's --same-work configuration (ResNet-50 v1.5, 224 px, batch 32 per "
        "device, float32, synthetic data) one after the other and print one table", epilog="Case options after '--' "
        "(Make: ARGS) go to every case, after its --same-work values.")
    for action in run._actions:  # the run options, shared: the cases run through the normal runner
        if action.dest not in ("help", "case", "baseline", "run_id"):
            frameworks._add_action(action)
    frameworks.add_argument("--tiny", action="store_true", help="each case's [tiny] sizes (and [same_work.tiny]): "
                            "a check that all run, not a measurement (Make: TINY=1)")

    doctor = sub.add_parser("doctor", help="what a cluster profile needs and what is missing here, one line each")
    doctor.add_argument("--cluster", default=None, help="cluster profile hostfiles/NAME.toml (default: this machine)")
    doctor.add_argument("--case", action="append", default=None,
                        help="check only this case's stack, image and data (repeatable; default: every case)")
    doctor.add_argument("--flavour", choices=FLAVOURS, default=None,
                        help="the stacks' cpu or cuda flavour (default: what this host fits) (Make: FLAVOUR)")

    data = sub.add_parser("data", help="prepare a case's dataset (download, pack, or generate with --synthetic)")
    data.add_argument("--case", required=True, help="case folder under cases/ (Make: CASE)")
    data.add_argument("--data-dir", type=Path, default=None,
                      help="default: the cluster profile's data_dir, else $DATA_DIR, else data/ in the checkout")
    data.add_argument("--cluster", default=None, help="cluster profile whose data_dir to use (Make: CLUSTER)")
    data.add_argument("--synthetic", action="store_true", help="generate a small dataset in the real format (Make: SYNTHETIC=1)")
    data.add_argument("--src", default=None, help="source to pack from, where the case supports it (Make: SRC)")

    install = sub.add_parser("install", help="install the local stack of a case or stack")
    install.add_argument("--case", help="install the stack this case uses")
    install.add_argument("--stack", help="install this stack (folder under containers/)")
    install.add_argument("--flavour", choices=FLAVOURS, default=None,
                         help="cpu or cuda (default: cuda where this host has NVIDIA GPUs) (Make: FLAVOUR)")
    install.add_argument("--wheels", type=Path, default=None,
                         help="install from this wheel folder alone, with no network (Make: WHEELS)")

    wheels = sub.add_parser("wheels", help="download every file of a stack's locks (hash-checked, sdists included) "
                            "into a folder, for installing where there is no network")
    wheels.add_argument("--case", help="the stack this case uses")
    wheels.add_argument("--stack", help="this stack (folder under containers/)")
    wheels.add_argument("--flavour", choices=FLAVOURS, action="append", default=None,
                        help="cpu or cuda, repeatable (default: both) (Make: FLAVOUR)")
    wheels.add_argument("--dest", type=Path, required=True, help="the wheel folder (Make: WHEELS)")

    sub.add_parser("cases", help="list the cases and their options")

    report = sub.add_parser("report", help="write HTML pages and a CSV from the result records")
    report.add_argument("--results-dir", type=Path, default=paths.RESULTS)
    report.add_argument("--out", type=Path, default=paths.RESULTS.parent, help="folder for the pages (default: reports/)")

    predict = sub.add_parser("predict", help="predict throughput and efficiency at other device counts")
    predict.add_argument("--case", required=True)
    predict.add_argument("--devices", required=True, help="device counts to predict, e.g. 8,16,32,64")
    predict.add_argument("--cluster", help="use this cluster's records and its profile's interconnect figures")
    predict.add_argument("--results-dir", type=Path, default=paths.RESULTS)
    predict.add_argument("--published", metavar="SOURCE", help="fit the case's published figures whose source contains SOURCE")
    predict.add_argument("--fit-up-to", type=int, default=None, help="fit only measurements at or below this many devices")
    predict.add_argument("--fit-network", action="store_true", help="fit bandwidth and latency even when the profile gives them")

    compare = sub.add_parser(
        "compare", help="compare the throughput of records B against records A", epilog=COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_argument("a", help="side A (the reference): a record file, a folder of records, or FOLDER?SELECTION")
    compare.add_argument("b", help="side B (the candidate): a record file, a folder of records, or FOLDER?SELECTION")
    compare.add_argument("--case", help="only this case (both sides)")
    compare.add_argument("--cluster", help="only this cluster (both sides)")
    compare.add_argument("--since", help="only records finished at or after this UTC date (YYYY-MM-DD; both sides)")

    query = sub.add_parser("query", help="list the records of a results folder from its index (table or CSV)")
    query.add_argument("--results-dir", type=Path, default=paths.RESULTS)
    query.add_argument("--case", help="only this case (Make: CASE)")
    query.add_argument("--cluster", help="only this cluster (Make: CLUSTER)")
    query.add_argument("--stack", help="only this stack (Make: STACK)")
    query.add_argument("--fingerprint", help="only this environment fingerprint (for now the stack lock's sha256), "
                       "or its first characters (Make: FINGERPRINT)")
    query.add_argument("--devices", help="only these device counts, e.g. 8 or 1,2,4 (Make: DEVICES)")
    query.add_argument("--since", help="only records finished at or after this UTC date, YYYY-MM-DD[THH:MM:SS] "
                       "(Make: SINCE)")
    query.add_argument("--until", help="only records finished on or before this UTC date (Make: UNTIL)")
    query.add_argument("--status", choices=["ok", "failed", "all"], default="all", help="default all (Make: STATUS)")
    query.add_argument("--format", choices=["table", "csv"], default="table", help="default table (Make: FORMAT)")
    compare.add_argument("--tolerance", type=float, default=0.05, help="slowdown that counts as a regression (0.05 = 5%%)")

    containers = sub.add_parser("containers", help="render, check or build the stacks' container images")
    containers.add_argument("action", choices=["render", "check", "build"],
                            help="render: write containers/<stack>/{cpu,cuda}.{def,Dockerfile} from container.toml and "
                                 "the locks; check: exit 1 if any is stale; build: apptainer (or docker) build")
    containers.add_argument("--stack", help="only this stack (Make: STACK)")
    containers.add_argument("--flavour", help="only cpu or cuda (Make: FLAVOUR)")
    containers.add_argument("--tool", default="auto", help="auto, apptainer or docker (Make: TOOL)")
    containers.add_argument("--base", default="pinned", help="pinned: the upstream base pinned by digest in "
                            "container.toml; debian: a Debian base made here from Debian's packages (Make: BASE)")
    containers.add_argument("--refresh-base", action="store_true",
                            help="make the Debian base again rather than reuse the one made before (Make: BASE_REFRESH=1)")
    containers.add_argument("--wheels", type=Path, default=None,
                            help="build from this wheel folder (make wheels) instead of filling one now (Make: WHEELS)")

    validate = sub.add_parser("validate", help="check result records against the record schema")
    validate.add_argument("records", nargs="+", type=Path)

    rerun = sub.add_parser("rerun", help="run a record's case again as it ran (same options, world shape, runtime, "
                           "stack, repetitions), refusing on drift, and compare with it")
    rerun.add_argument("record", help="the result record to reproduce (Make: RECORD)")
    hosts = rerun.add_mutually_exclusive_group()
    hosts.add_argument("--cluster", default=None, help="cluster profile for the hosts (default: the record's cluster "
                       "where hostfiles/ has its profile, else the record's hostfile where it exists, else localhost)")
    hosts.add_argument("--hostfile", default=None, help="hostfile for the hosts (Make: HOSTFILE)")
    rerun.add_argument("--allow-drift", action="store_true", help="run even where stack lock, image, suite checkout, "
                       "case option defaults or devices differ from the record (Make: ALLOW_DRIFT=1)")
    rerun.add_argument("--data-dir", type=Path, default=None, help="where datasets live (Make: DATA_DIR)")
    rerun.add_argument("--results-dir", type=Path, default=paths.RESULTS, help="where the new record goes")
    rerun.add_argument("--runs-dir", type=Path, default=paths.RUNS, help="where run directories go")
    rerun.add_argument("--tolerance", type=float, default=0.05, help="difference the comparison tolerates (0.05 = 5%%)")
    rerun.add_argument("--dry-run", action="store_true", help="check and print the plan; start nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, case_args = request.split_case_args(argv)
    args = build_cli().parse_args(own)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return COMMANDS[args.command](args, case_args, argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cmd_run(args, case_args, argv) -> int:
    from suite.execution.run import run

    return run(request.from_namespace(args, case_args, argv))


def cmd_compare_frameworks(args, case_args, argv) -> int:
    from suite.commands.compare_frameworks import compare_frameworks

    # The run options it shares with `run` (copied above) fill the request's fields of the same names.
    return compare_frameworks(request.from_namespace(args, case_args), args.tiny)


def cmd_doctor(args, case_args, argv) -> int:
    from suite.commands.doctor import doctor

    return doctor(args.cluster, args.case, args.flavour)


def cmd_data(args, case_args, argv) -> int:
    from suite.execution.plan import StackRequest
    from suite.runtimes import local
    from suite.stacks.locks import load_stack

    case = load_case(args.case)
    if case.data_script is None:
        raise UsageError(f"case {case.name} needs no data")
    cluster = load_cluster(args.cluster) if args.cluster else None
    data_dir = Path(args.data_dir or (cluster and cluster.data_dir) or paths.data_dir()).resolve()
    extra = (["--synthetic"] if args.synthetic else []) + (["--src", args.src] if args.src else [])
    stack_env = local.prepare(StackRequest(load_stack(case.stack), wheels=cluster.wheels if cluster else None))
    argv = stack_env.argv("python", str(case.data_script), "--data-dir", str(data_dir), *extra, *case_args)
    return subprocess.run(argv, env={**os.environ, **stack_env.env}).returncode


def stack_of(args):
    from suite.stacks.locks import load_stack

    if not (args.case or args.stack):
        raise UsageError(f"{args.command} needs --case NAME or --stack NAME")
    return load_stack(args.stack or load_case(args.case).stack)


def cmd_install(args, case_args, argv) -> int:
    from suite.stacks.locks import ensure_installed, local_flavour

    if args.wheels and not args.wheels.is_dir():
        raise UsageError(f"WHEELS={args.wheels} is not a folder (fill one with `make wheels`)")
    try:
        installed = ensure_installed(local_flavour(stack_of(args), args.flavour), wheels=args.wheels)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(installed.prefix)
    return 0


def cmd_wheels(args, case_args, argv) -> int:
    import time

    from suite.stacks import wheelhouse
    from suite.stacks.locks import load_flavour

    stack = stack_of(args)
    flavours = [load_flavour(stack, name) for name in (args.flavour or FLAVOURS)]
    for flavour in flavours:
        if flavour.no_local and not args.flavour:
            print(f"wheels: {flavour.id} left out: {flavour.no_local}")
            continue
        started, before = time.monotonic(), wheelhouse.size_mb(args.dest) if args.dest.is_dir() else 0.0
        try:
            wheelhouse.fill(args.dest, flavour.locks(), flavour.pip_extra_index)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wheels: {flavour.id}: {wheelhouse.size_mb(args.dest) - before:.0f} MB added in "
              f"{time.monotonic() - started:.0f} s; install with WHEELS={args.dest} FLAVOUR={flavour.name}")
    return 0


def cmd_cases(args, case_args, argv) -> int:
    for name in known_cases():
        case = load_case(name)
        print(f"{name}: {case.spec.get('summary', '')}  [stack {case.stack}, launcher {case.launcher}]")
        print("  " + build_parser(case.spec).format_help().replace("\n", "\n  ").rstrip())
    return 0


def cmd_validate(args, case_args, argv) -> int:
    from suite.records.schema import validate

    bad = 0
    for path in args.records:
        try:
            validate(json.loads(path.read_text()))
            print(f"ok: {path}")
        except Exception as exc:  # report every broken file, not just the first
            print(f"invalid: {path}: {str(exc).splitlines()[0]}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


def cmd_report(args, case_args, argv) -> int:
    from suite.analysis.report import write_report

    for path in write_report(args.results_dir, args.out, warn=lambda m: print(m, file=sys.stderr)):
        print(path)
    return 0


def cmd_query(args, case_args, argv) -> int:
    from suite.records.index import Selection, devices_list
    from suite.records.query import query

    selection = Selection(case=args.case, cluster=args.cluster, stack=args.stack, fingerprint=args.fingerprint,
                          devices=devices_list(args.devices) if args.devices else (), since=args.since,
                          until=args.until, status=args.status)
    query(args.results_dir, selection, args.format, sys.stdout, warn=lambda m: print(m, file=sys.stderr))
    return 0


def cmd_predict(args, case_args, argv) -> int:
    from suite.commands.predict import predict

    print(predict(args))
    return 0


def cmd_rerun(args, case_args, argv) -> int:
    from suite.execution.rerun import rerun

    if case_args:
        raise UsageError("rerun takes the case options from the record; nothing goes after '--'")
    if not 0 <= args.tolerance < 1:
        raise UsageError(f"--tolerance must be a fraction between 0 and 1, got {args.tolerance}")
    args.argv = argv
    return rerun(args)


def cmd_compare(args, case_args, argv) -> int:
    from suite.analysis.compare import compare, format_rows, select

    if not 0 <= args.tolerance < 1:
        raise UsageError(f"--tolerance must be a fraction between 0 and 1, got {args.tolerance}")
    warn = lambda m: print(m, file=sys.stderr)  # noqa: E731
    a = select(args.a, args.case, args.cluster, args.since, warn)
    b = select(args.b, args.case, args.cluster, args.since, warn)
    if not a or not b:
        raise UsageError(f"nothing to compare: {len(a)} record(s) in A, {len(b)} in B after selection")
    rows = compare(a, b, args.tolerance)
    print(format_rows(rows))
    return 1 if any(r.verdict == "slower" for r in rows) else 0


def cmd_containers(args, case_args, argv) -> int:
    from suite.execution import image_builds

    if args.action == "build":
        image_builds.build(args.stack, args.flavour, args.tool, args.base, args.refresh_base, wheels=args.wheels)
        return 0
    stale = image_builds.render(check=args.action == "check")
    for path in stale:
        print(f"{'stale' if args.action == 'check' else 'wrote'}: {path.relative_to(paths.ROOT)}")
    return 1 if stale and args.action == "check" else 0


COMMANDS = {"run": cmd_run, "install": cmd_install, "cases": cmd_cases, "validate": cmd_validate,
            "data": cmd_data, "wheels": cmd_wheels, "report": cmd_report, "compare": cmd_compare,
            "containers": cmd_containers, "predict": cmd_predict, "query": cmd_query, "doctor": cmd_doctor,
            "rerun": cmd_rerun,
            "compare-frameworks": cmd_compare_frameworks}
