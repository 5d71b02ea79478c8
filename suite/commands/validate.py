"""`suite validate`: result records checked against the record schema (files, or every *.json of a folder)."""

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.commands import common_args
from suite.execution.request import request_of

NAME = "validate"
HELP = "check result records against the record schema"


@dataclass(frozen=True)
class ValidateRequest:
    records: list[Path]


def add_arguments(parser) -> None:
    parser.add_argument("records", nargs="+", type=paths.given, help="record files, or folders of them (their *.json)")


def make_request(args, case_args: list[str], argv: list[str]) -> ValidateRequest:
    common_args.no_case_args(NAME, case_args)
    if missing := [str(path) for path in args.records if not path.exists()]:
        raise UsageError(f"no such record file or folder: {', '.join(missing)}")
    if empty := [str(path) for path in args.records if path.is_dir() and not any(path.glob("*.json"))]:
        raise UsageError(f"no record files (*.json) in {', '.join(empty)}")
    files = [f for path in args.records for f in (sorted(path.glob("*.json")) if path.is_dir() else [path])]
    return request_of(ValidateRequest, args, records=files)


def run(req: ValidateRequest) -> int:
    from suite.records.schema import validate

    bad = 0
    for path in req.records:
        try:
            validate(json.loads(path.read_text()))
            print(f"ok: {path}")
        except Exception as exc:  # report every broken file, not just the first
            print(f"invalid: {path}: {str(exc).splitlines()[0]}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0
