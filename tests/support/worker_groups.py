"""How `make test`'s pytest-xdist workers share the tests (`-n 2 --dist loadscope`): whole modules, so that a
module's fixtures are made once, and every module that uses the Docker engine's images or what is made from
them (the SIFs, Podman's and Charliecloud's stores) in one worker, as they share one engine and one cache.
sshd and the SLURM clusters pick their own ports, addresses and namespaces: each worker may start its own.
The groups start longest first, by the seconds each took in a measured run (DURATIONS, kept in the repository:
a fresh clone has no earlier run; today's from a warm run), so that no long module is left to run alone at the
end; a group not measured there counts a second a test. Each run writes its own groups' seconds to
MEASURED_DURATIONS: copy that file over DURATIONS when modules come, go or change much.

A module is of the images when a function in it (a test or a module fixture) takes one of IMAGE_FIXTURES,
read from its source: the scheduler runs in the controller, which collects nothing
(tests/unit/test_worker_groups.py holds this to the fixtures pytest resolves). Loaded by conftest.py."""

import ast
import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE_FIXTURES = {"docker_engine", "cpu_images", "apptainer_here", "pytorch_sif", "docker_sifs"}
IMAGES = "images"
DURATIONS = ROOT / "tests" / "support" / "durations.json"
MEASURED_DURATIONS = ROOT / "build" / "test-durations.json"


@cache
def takes_image_fixtures(module: Path) -> bool:
    functions = [n for n in ast.walk(ast.parse(module.read_text()))
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return any(arg.arg in IMAGE_FIXTURES for function in functions for arg in function.args.args)


def group_of(nodeid: str) -> str:
    """The worker group of a test: IMAGES, or its module's path."""
    module = nodeid.split("::", 1)[0]
    path = ROOT / module
    return IMAGES if path.suffix == ".py" and path.is_file() and takes_image_fixtures(path) else module


@cache
def measured_seconds() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def expected_seconds(group: str, tests: int) -> float:
    """How long a group is expected to take: its seconds in DURATIONS, else a second a test."""
    return measured_seconds().get(group, float(tests))


def longest_first(workqueue: dict[str, dict]) -> list[tuple[str, dict]]:
    """The work units (group -> its tests) in the order they start: longest expected first."""
    return sorted(workqueue.items(), key=lambda unit: -expected_seconds(unit[0], len(unit[1])))


SECONDS_BY_GROUP: Counter = Counter()


def pytest_runtest_logreport(report):
    """Every phase's seconds added to its group's (in the controller, which receives the workers' reports)."""
    SECONDS_BY_GROUP[group_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session):
    """The controller of a run in workers writes its groups' seconds (not a run without them: the other
    CPythons' unit tests, a single module tried by hand)."""
    if hasattr(session.config, "workerinput") or session.config.getoption("dist", "no") != "loadscope":
        return
    MEASURED_DURATIONS.parent.mkdir(exist_ok=True)
    MEASURED_DURATIONS.write_text(json.dumps({group: round(seconds, 1) for group, seconds in
                                              sorted(SECONDS_BY_GROUP.items(), key=lambda g: -g[1])}, indent=1) + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        """loadscope, its scopes the groups above, the longest expected first (xdist orders them by size)."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete when the first unit is handed out
                units = longest_first(self.workqueue)
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return ModuleGroups(config, log)
