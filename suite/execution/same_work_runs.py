"""The runs of `suite compare-frameworks`: every case with a `[same_work]` table, one after the other through
the normal runner with the same run options, then the same-work table (suite/analysis/same_work.py) of the
records they wrote."""

import json
from dataclasses import replace
from pathlib import Path

from suite.analysis.same_work import build_rows, format_table
from suite.base.errors import INTERRUPTED
from suite.base.log import log
from suite.execution import run as execution_run
from suite.execution.request import RunRequest
from suite.inputs.cases import known_cases, load_case
from suite.instack.case_options import option_args
from suite.records.read import Point, new_records, record_files


def same_work_cases() -> list[str]:
    return [name for name in known_cases() if "same_work" in load_case(name).spec]


def case_argv(name: str, tiny: bool, extra: list[str]) -> list[str]:
    """--same-work, with --tiny the case's [tiny] then [same_work.tiny] values, then `extra`."""
    case = load_case(name)
    sizes = {**case.spec.get("tiny", {}), **case.spec["same_work"].get("tiny", {})} if tiny else {}
    return ["--same-work", *option_args(sizes), *extra]


def compare_frameworks(request: RunRequest, tiny: bool) -> int:
    """Runs every same-work case with `request` (its case is set here, its case_args go to every case),
    then prints the table of the records they wrote."""
    requests = [replace(request, case=name, case_args=case_argv(name, tiny, request.case_args), argv=[])
                for name in same_work_cases()]
    for req in requests:  # bad input for any case is refused before the first one runs
        execution_run.check(req)
    results = Path(request.results_dir)
    before = record_files(results)
    status = 0
    for req in requests:
        log(f"compare-frameworks: {req.case} {' '.join(req.case_args)}")
        status = max(status, execution_run.run(req))
        if any(r["reason"] == INTERRUPTED for r in written_since(results, before)):
            break
    if not request.dry_run:
        print("\n" + format_table(build_rows([Point(r, r["run_id"]) for r in written_since(results, before)
                                               if r["status"] == "ok"])))
    return status


def written_since(folder: Path, before: set[Path]) -> list[dict]:
    return [json.loads(path.read_text()) for path in new_records(folder, before)]
