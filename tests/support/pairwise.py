"""Which runs across two hosts in an image `make test` makes, and which only `make test-all` adds.

The full product (every image runtime × every case × both schedulers) proves little more than its pairs:
each image runtime runs a case of each stack and launcher (docker_fixtures.OTHER_CASES and pytorch-ddp) on this
machine (runtime × launcher: every launcher in every image) and pytorch-ddp across two hosts under SLURM and
over ssh (runtime × scheduler); the local runtime runs every
case on the two SLURM nodes and over ssh (case × scheduler). What is left, a launcher crossing hosts inside
an image, is covered once for each (case, scheduler): ACROSS_IN_IMAGES names the runtime that does it in
`make test`. A case that crosses hosts in a runtime's image has run in that image: its run on this machine
there adds nothing to the pairs. Every other such run carries the `full_product` marker, which `make test`
leaves out and `make test-all` runs (CONTRIBUTING.md, "The tests")."""

import pytest

# (case, scheduler) -> the image runtime that runs it across two hosts in `make test`; spread so that each
# runtime crosses hosts with several launchers, and Podman (srun steps only) under SLURM alone
ACROSS_IN_IMAGES = {
    ("pytorch-synthetic", "ssh"): "apptainer",  # horovodrun starting each rank in its container over ssh
    ("mxnet-imagenet", "ssh"): "apptainer",
    ("pytorch-gpt", "slurm"): "apptainer",
    ("tf-cifar", "slurm"): "apptainer",
    ("tf-cifar", "ssh"): "charliecloud",
    ("jax-gpt", "ssh"): "charliecloud",
    ("pytorch-gpt", "ssh"): "charliecloud",
    ("pytorch-synthetic", "slurm"): "charliecloud",
    ("mxnet-imagenet", "slurm"): "podman",
    ("jax-gpt", "slurm"): "podman",
}
SCHEDULERS = ("slurm", "ssh")
FULL_PRODUCT = pytest.mark.full_product


def in_make_test(runtime: str, case: str, where: str) -> bool:
    return ACROSS_IN_IMAGES.get((case, where)) == runtime


def crosses_hosts(runtime: str, case: str) -> bool:
    """Whether `make test` runs the case across two hosts in the runtime's image (so it runs there)."""
    return any(in_make_test(runtime, case, where) for where in SCHEDULERS)


def on_this_machine(runtime: str, cases) -> list:
    """pytest parameters (case) for `runtime`'s runs of each case with two ranks on this machine: a case that
    crosses hosts in the runtime's image in `make test` already ran there, so its run here is full_product."""
    return [pytest.param(case, id=case, marks=FULL_PRODUCT if crosses_hosts(runtime, case) else ())
            for case in sorted(cases)]


def across(runtime: str, cases, schedulers=SCHEDULERS) -> list:
    """pytest parameters (case, where) for `runtime`'s runs across two hosts: the product of cases and
    schedulers, those not in `make test` marked full_product; ids read `where-case`."""
    return [pytest.param(case, where, id=f"{where}-{case}",
                         marks=() if in_make_test(runtime, case, where) else FULL_PRODUCT)
            for case in sorted(cases) for where in schedulers]
