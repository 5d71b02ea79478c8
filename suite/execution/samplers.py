"""One telemetry sampler per host added to each repetition's plan (suite/instack/telemetry_sampler.py),
started and ended with the case's processes by the same scheduler."""

import sys
from dataclasses import replace
from pathlib import Path

from suite.execution.plan import Plan, Process
from suite.records.telemetry_window import sample_file


def with_samplers(plan: Plan, world, rep_dir, interval: float | None) -> Plan:
    """The plan and one sampler per host, last (the record's command stays the case's first process)."""
    if not interval:
        return plan
    program = str(Path(__file__).parents[1] / "instack" / "telemetry_sampler.py")
    samplers = tuple(
        Process(f"telemetry-{i}", host.name,
                [sys.executable, program, "--out", str(sample_file(rep_dir, host.name)), "--interval", f"{interval:g}",
                 "--match", f"SUITE_RUN_DIR={rep_dir}"], {}, str(Path(rep_dir).resolve()), daemon=True)
        for i, host in enumerate(world.hosts))
    return replace(plan, processes=plan.processes + samplers)
