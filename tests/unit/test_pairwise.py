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


def test_the_image_cases_hold_every_launcher_and_stack_of_the_cases_once():
    """runtime x launcher: with pytorch-ddp (each image runtime's own tests run it under torchrun), OTHER_CASES start
    every launcher a case can use in every stack's image, and no pair (stack, launcher) twice."""
    from suite.inputs.cases import known_cases, load_case

    def pair(name: str, case_args=()) -> tuple[str, str]:
        case = load_case(name)
        return case.stack, case.launcher_name(case.parse_options(list(case_args)))

    used = [pair(name, args) for name, (_, args) in OTHER_CASES.items()] + [pair("pytorch-ddp")]
    assert len(used) == len(set(used))
    stacks = {load_case(name).stack for name in known_cases()}
    launchers = {load_case(name).launcher for name in known_cases()} | {"ranks"}
    assert {stack for stack, _ in used} == stacks and {launcher for _, launcher in used} == launchers
