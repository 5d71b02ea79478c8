"""jax-gpt's bad input is refused before launch in one line (unknown options, --parallel, a width that is
not a multiple of the heads, a global batch that does not divide over the devices), and the jaxdist
launcher tells every process of a world the one coordinator, the process count and its own id."""

import pytest

from suite.base.errors import UsageError
from suite.execution import plugins
from suite.execution.plan import Launch, StackEnv
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import Host, World

CASE = load_case("jax-gpt")


@pytest.mark.parametrize("argv, message", [
    (["--bogus", "1"], "case jax-gpt: unrecognized arguments: --bogus 1 (its options: --parallel"),
    (["--parallel", "ddp"], "argument --parallel: invalid choice: 'ddp' (choose from 'dp', 'fsdp')"),
    (["--width", "30", "--heads", "4"], "case jax-gpt: --width must be a multiple of --heads"),
    (["--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
])
def test_bad_options_are_refused_before_launch(argv, message):
    with pytest.raises(UsageError) as refused:
        CASE.parse_options(argv)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_global_batch_that_does_not_divide_over_the_devices_is_refused_for_that_point():
    options = CASE.parse_options(["--global-batch", "6"])  # the world is not known yet: no refusal
    CASE.check_world(options, World((Host("node1", 2), Host("node2", 1)), "hf"))  # 6 over 3 devices
    with pytest.raises(UsageError, match=r"^case jax-gpt at 2 node\(s\), 2 device\(s\) on node1: --global-batch must "
                                         r"divide over the devices .*\(rule: global_batch % devices == 0\)$"):
        CASE.check_world(options, World((Host("node1", 2), Host("node2", 2)), "hf"))
    CASE.check_world(CASE.parse_options([]), World((Host("node1", 4), Host("node2", 3)), "hf"))  # per device


def test_jaxdist_gives_every_process_the_coordinator_its_id_and_the_count():
    world = World((Host("node1", 2), Host("node2", 2)), "hf")
    stack = StackEnv("local", "/stack/bin", env={"PYTHONPATH": "/suite"})
    launch = Launch("/cases/jax-gpt/train.py", ["--parallel", "fsdp"], world, stack, "/runs/r/rep-0", "/data",
                    CASE.parse_options(["--parallel", "fsdp"]))
    plan = plugins.load("launchers", "jaxdist").plan(launch)
    envs = [p.env for p in plan.processes]
    assert [p.host for p in plan.processes] == ["node1", "node1", "node2", "node2"] and plan.ranks == 4
    assert {e["JAX_COORDINATOR_ADDRESS"] for e in envs} == {plan.details["coordinator"]}
    assert plan.details["coordinator"].startswith("node1:")
    assert [e["JAX_PROCESS_ID"] for e in envs] == [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["JAX_NUM_PROCESSES"] for e in envs} == {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"] and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert all(list(p.argv[-3:]) == ["/cases/jax-gpt/train.py", "--parallel", "fsdp"] for p in plan.processes)
