"""The test workers' groups (tests/support/worker_groups.py): the modules read from their source as using the
image fixtures are exactly those whose tests pytest resolves to one of them, and the scheduler keeps a
module's tests together and every image module in one group."""

import json
import os
import subprocess
import sys

from conftest import ROOT
from support.worker_groups import IMAGE_FIXTURES, IMAGES, group_of

# Collected in a pytest of its own: each test module and whether any of its tests' fixtures is an image fixture.
RESOLVED = f"""
import json, pytest
class Report:
    def pytest_collection_finish(self, session):
        uses = {{}}
        for item in session.items:
            module = item.nodeid.split("::")[0]
            uses[module] = uses.get(module, False) or bool(set(item.fixturenames) & set({sorted(IMAGE_FIXTURES)!r}))
        print("RESOLVED " + json.dumps(uses))
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"], plugins=[Report()])
"""


def resolved_image_modules() -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not as an xdist worker's
    out = subprocess.run([sys.executable, "-c", RESOLVED], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    [line] = [line for line in out.stdout.splitlines() if line.startswith("RESOLVED ")]
    return json.loads(line.removeprefix("RESOLVED "))


def test_the_image_modules_read_from_source_are_those_pytest_resolves_to_image_fixtures():
    uses = resolved_image_modules()
    assert sum(uses.values()) >= 5, uses  # Docker, Apptainer, Podman, Charliecloud and the site check at least
    assert {m: group_of(f"{m}::t") == IMAGES for m in uses} == uses


def test_a_module_keeps_its_tests_together_and_the_image_modules_share_one_group():
    assert group_of("tests/unit/test_pairwise.py::test_a[x]") == group_of("tests/unit/test_pairwise.py::test_b")
    assert group_of("tests/unit/test_pairwise.py::test_a") == "tests/unit/test_pairwise.py"
    assert group_of("tests/integration/test_podman_runs.py::t") == group_of("tests/integration/test_apptainer.py::t")
    assert group_of("tests/integration/test_podman_runs.py::t") == IMAGES
    assert group_of("tests/integration/test_slurm.py::t") == "tests/integration/test_slurm.py"


class Worker:
    """What the scheduler asks of a pytest-xdist worker: the indices of the tests it is sent."""

    shutting_down = False

    def __init__(self, name: str):
        self.sent: list[int] = []
        self.gateway = type("Gateway", (), {"id": name})

    def send_runtest_some(self, indices):
        self.sent += indices

    def shutdown(self):
        self.shutting_down = True


def test_the_groups_start_longest_first_by_their_measured_seconds(monkeypatch):
    """A one-test module measured long starts before a module of many short tests; an unmeasured group counts
    a second a test."""
    from types import SimpleNamespace

    from support import worker_groups

    measured = {"tests/integration/test_resume_slurm.py": 130.0, "tests/unit/test_pairwise.py": 5.0}
    monkeypatch.setattr(worker_groups, "measured_seconds", lambda: measured)
    collection = ([f"tests/unit/test_pairwise.py::test_{i}" for i in range(20)]
                  + ["tests/integration/test_resume_slurm.py::test_resumed"]
                  + [f"tests/unit/test_rerun.py::test_{i}" for i in range(9)])
    options = {"dist": "loadscope", "tx": ["2*popen"]}
    config = SimpleNamespace(getvalue=options.__getitem__, option=SimpleNamespace(loadscopereorder=True))
    scheduler = worker_groups.pytest_xdist_make_scheduler(config, None)
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    modules = [[collection[i].split("::")[0] for i in worker.sent] for worker in (first, second)]
    # 130 s first; then the 9 unmeasured tests (9 s) before the 20 tests measured at 5 s, which go to the
    # first worker as xdist keeps a worker two tests ahead
    assert modules[0][0] == "tests/integration/test_resume_slurm.py"
    assert set(modules[1]) == {"tests/unit/test_rerun.py"}
    assert modules[0][1:] == ["tests/unit/test_pairwise.py"] * 20


def test_the_measured_seconds_name_groups_that_exist():
    """tests/support/durations.json (the order's source) names the image group and modules that exist."""
    from support.worker_groups import DURATIONS, IMAGES

    durations = json.loads(DURATIONS.read_text())
    assert IMAGES in durations and all(seconds >= 0 for seconds in durations.values())
    missing = [group for group in durations if group != IMAGES and not (ROOT / group).is_file()]
    assert not missing, f"{DURATIONS.name} names modules that are gone (rewrite it from build/test-durations.json)"
