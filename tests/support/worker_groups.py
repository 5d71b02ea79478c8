"""How `make test`'s pytest-xdist workers share the tests (`-n 2 --dist loadscope`): whole modules, so that a
module's fixtures are made once, and every module that uses the Docker engine's images or what is made from
them (the SIFs, Podman's and Charliecloud's stores) in one worker, as they share one engine and one cache.
sshd and the SLURM clusters pick their own ports, addresses and namespaces: each worker may start its own.

A module is of the images when a function in it (a test or a module fixture) takes one of IMAGE_FIXTURES,
read from its source: the scheduler runs in the controller, which collects nothing
(tests/unit/test_worker_groups.py holds this to the fixtures pytest resolves). Loaded by conftest.py."""

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE_FIXTURES = {"docker_engine", "cpu_images", "apptainer_here", "pytorch_sif", "docker_sifs"}
IMAGES = "images"


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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        """loadscope, its scopes the groups above; the largest group starts first (xdist orders by size)."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ModuleGroups(config, log)
