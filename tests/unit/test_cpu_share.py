"""The rule that splits a machine's cores over its slots (suite/instack/cpu_binding.py: cpu_share),
on synthetic affinity lists: the expectations of the binding tests come from it on any core count,
odd ones included (`taskset -c 0-2 make test`)."""

import pytest

from suite.instack.cpu_binding import cpu_share


@pytest.mark.parametrize("cores, first, second", [
    (1, [0], [0]),  # one core: both ranks share it
    (2, [0], [1]),
    (3, [0], [1, 2]),  # slot k takes cores [k*n//2, (k+1)*n//2): the second rank gets the odd one out
    (4, [0, 1], [2, 3]),
    (5, [0, 1], [2, 3, 4]),
    (7, [0, 1, 2], [3, 4, 5, 6]),
])
def test_two_ranks_split_the_cores_the_second_taking_the_odd_one(cores, first, second):
    allowed = list(range(cores))
    assert cpu_share(allowed, 0, 1, 2) == first and cpu_share(allowed, 1, 2, 2) == second
    assert len(cpu_share(allowed, 1, 2, 2)) == max(1, cores - cores // 2)  # the threads rank 1 is given


def test_the_share_is_of_the_affinity_list_not_of_core_numbers():
    assert cpu_share([4, 9, 11], 1, 2, 2) == [9, 11]  # e.g. taskset -c 4,9,11
    assert cpu_share([0, 1, 2], 0, 3, 3) == [0, 1, 2]  # a process that drives every slot of its node
    assert [cpu_share([0, 1, 2], k, k + 1, 4) for k in range(4)] == [[0], [0], [1], [2]]  # fewer cores than slots
