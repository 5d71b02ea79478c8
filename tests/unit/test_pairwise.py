"""`make test`'s share of the runs across two hosts in images (tests/support/pairwise.py): every case crosses
hosts in some image under each scheduler, once, and everything else is marked for `make test-all`."""

import pytest
from support.docker_fixtures import OTHER_CASES
from support.pairwise import ACROSS_IN_IMAGES, FULL_PRODUCT, SCHEDULERS, across, on_this_machine

# the image runtimes whose tests cross two hosts, and how
CROSSING = {"apptainer": SCHEDULERS, "charliecloud": SCHEDULERS, "podman": ("slurm",)}


def test_every_case_crosses_hosts_in_an_image_under_each_scheduler_once():
    assert set(ACROSS_IN_IMAGES) == {(case, where) for case in OTHER_CASES for where in SCHEDULERS}
    assert all(where in CROSSING[runtime] for (_, where), runtime in ACROSS_IN_IMAGES.items())
    assert set(ACROSS_IN_IMAGES.values()) == set(CROSSING)  # each runtime keeps some of them


@pytest.mark.parametrize("runtime", sorted(CROSSING))
def test_only_the_chosen_runs_are_left_to_make_test(runtime):
    params = across(runtime, OTHER_CASES, CROSSING[runtime])
    assert len(params) == len(OTHER_CASES) * len(CROSSING[runtime])
    kept = {tuple(p.values) for p in params if all(m.name != FULL_PRODUCT.name for m in p.marks)}
    assert kept == {key for key, chosen in ACROSS_IN_IMAGES.items() if chosen == runtime}
    assert all(p.id == f"{p.values[1]}-{p.values[0]}" for p in params)


def kept(params) -> set:
    return {tuple(p.values) for p in params if all(m.name != FULL_PRODUCT.name for m in p.marks)}


@pytest.mark.parametrize("runtime", sorted(CROSSING))
def test_every_case_runs_in_every_image_runtime_once_in_make_test(runtime):
    """runtime x case: across hosts where the table says so, else with two ranks on this machine, never both."""
    across_hosts = {case for case, _ in kept(across(runtime, OTHER_CASES, CROSSING[runtime]))}
    here = {case for (case,) in kept(on_this_machine(runtime, OTHER_CASES))}
    assert across_hosts | here == set(OTHER_CASES) and across_hosts & here == set()
