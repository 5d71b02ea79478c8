"""The rule that splits a machine's cores over its slots (suite/instack/cpu_binding.py: cpu_share),
on synthetic affinity lists: the expectations of the binding tests come from it on any core count,
odd ones included (`taskset -c 0-2 make test`)."""

import pytest

from suite.instack.cpu_binding import cpu_share, slots


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


@pytest.mark.parametrize("per_host", [1, 2, 3])
def test_horovodrun_on_hosts_of_this_machine_gives_each_rank_its_own_slot(monkeypatch, per_host):
    """horovodrun starts every worker of a loopback hostfile with one environment: each finds its host's
    first slot from its rank (ranks numbered host by host), so that the hosts' workers take distinct cores."""
    from suite.execution.plan import Launch, StackEnv
    from suite.inputs.hostfiles import Host, World
    from suite.launchers import horovod

    world = World((Host("127.0.0.2", per_host), Host("127.0.0.3", per_host)), "loopback")
    launch = Launch("/cases/c/train.py", [], world, StackEnv("local", "/stack/bin"), "/runs/r", "/data")
    [launcher] = horovod.horovodrun_plan(launch).processes
    for name in ("SUITE_SLOT_OFFSET", "SUITE_MACHINE_SLOTS"):
        monkeypatch.setenv(name, launcher.env[name])
    placed = [slots(local, per_host, host * per_host + local) for host in range(2) for local in range(per_host)]
    assert placed == [(k, k + 1, 2 * per_host) for k in range(2 * per_host)]  # every slot once, in rank order
    with pytest.raises(SystemExit, match="must pass its global rank"):  # a case that does not say its rank
        slots(0, per_host)


def test_horovodrun_across_other_machines_leaves_each_host_its_cores():
    from suite.execution.plan import Launch, StackEnv
    from suite.inputs.hostfiles import Host, World
    from suite.launchers import horovod

    world = World((Host("node1.invalid", 2), Host("node2.invalid", 2)), "cluster")
    launch = Launch("/cases/c/train.py", [], world, StackEnv("local", "/stack/bin"), "/runs/r", "/data")
    [launcher] = horovod.horovodrun_plan(launch).processes
    assert not {"SUITE_SLOT_OFFSET", "SUITE_MACHINE_SLOTS"} & set(launcher.env)
