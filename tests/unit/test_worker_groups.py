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
