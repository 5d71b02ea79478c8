"""One recipe per stack and flavour: the pytorch stack's cpu environment as each tool that builds here
made it (the local stack, the Docker image, the Apptainer SIF built from its definition) holds every
package of the lock at the lock's version, and the images hold the same packages as each other. The
lists compared are read from each build (pip list inside the image or environment), not from the lock."""

import json
import platform
import subprocess

import pytest
from conftest import installed_stack
from packaging.utils import canonicalize_name

from suite.stacks import images, lock_targets
from suite.stacks.locks import lock_pins
from suite.stacks.recipes import load_flavour, load_stack

STACK = "pytorch"


def installed_packages(python) -> dict[str, str]:
    done = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                          timeout=120, check=True)
    return images.packages_from_pip_list(done.stdout)


def differing(pins: dict[str, str], packages: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Pins whose package is missing or at another version (names compared as PEP 503 normalises them)."""
    found = {canonicalize_name(name): version for name, version in packages.items()}
    return {name: (version, found.get(canonicalize_name(name))) for name, version in pins.items()
            if found.get(canonicalize_name(name)) != version}


def test_every_build_of_a_stack_has_the_locks_versions(cpu_images, pytorch_sif):
    fl = load_flavour(load_stack(STACK), "cpu")
    lock = fl.stack.dir / fl.lock
    builds = {"docker": cpu_images[STACK], "apptainer": pytorch_sif}
    for tool, meta in builds.items():
        assert meta["lock_sha256"] == fl.lock_sha256, tool
        packages = meta["packages"]
        assert "torch" in packages, (tool, sorted(packages)[:20])
        # the lock's markers as the image's Python (container.toml's `python`) reads them
        target = lock_targets.Target(fl.python.removeprefix("python"), platform.machine())
        pins = lock_pins(lock, target)
        assert pins and not differing(pins, packages), (tool, differing(pins, packages))
    docker, sif = (builds[t]["packages"] for t in ("docker", "apptainer"))
    assert docker == sif, {k: (docker.get(k), sif.get(k)) for k in docker.keys() ^ sif.keys()
                           | {k for k in docker.keys() & sif.keys() if docker[k] != sif[k]}}


def test_the_local_stack_has_the_locks_versions_as_the_images_do(cpu_images):
    local = installed_stack(STACK, log=lambda *_: None)
    if local.flavour.name != "cpu":
        pytest.skip("this host's local stack is the cuda flavour: another lock than the cpu image's")
    pins = lock_pins(local.flavour.stack.dir / local.flavour.lock)  # this interpreter's markers
    packages = installed_packages(local.python)
    assert pins and not differing(pins, packages), differing(pins, packages)
    image = cpu_images[STACK]["packages"]
    assert packages["torch"] == image["torch"], json.dumps([packages, image])[:2000]
