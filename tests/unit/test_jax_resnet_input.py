"""jax-resnet's bad input is refused before launch in one line (unknown options, a model or data it does not
have, an image too small for the network's five halvings, a global batch that does not divide over the
devices), and its --same-work is pytorch-ddp's same work, in float32."""

import pytest

from suite.base.errors import UsageError
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import Host, World

CASE = load_case("jax-resnet")


@pytest.mark.parametrize("argv, message", [
    (["--bogus", "1"], "case jax-resnet: unrecognized arguments: --bogus 1 (its options: --data"),
    (["--model", "tiny-cnn"], "argument --model: invalid choice: 'tiny-cnn' (choose from 'resnet50', 'resnet18')"),
    (["--data", "jpeg"], "argument --data: invalid choice: 'jpeg' (choose from 'synthetic', 'imagefolder')"),
    (["--workers", "0"], "argument --workers: must be at least 1, got 0"),
    (["--image-size", "16"], "argument --image-size: must be at least 32, got 16"),
    (["--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
])
def test_bad_options_are_refused_before_launch(argv, message):
    with pytest.raises(UsageError) as refused:
        CASE.parse_options(argv)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_global_batch_that_does_not_divide_over_the_devices_is_refused_for_that_point():
    options = CASE.parse_options(["--global-batch", "6"])
    CASE.check_world(options, World((Host("node1", 2), Host("node2", 1)), "hf"))  # 6 over 3 devices
    with pytest.raises(UsageError, match=r"^case jax-resnet at 2 node\(s\), 2 device\(s\) on node1: --global-batch "
                                         r"must divide over the devices .*\(rule: global_batch % devices == 0\)$"):
        CASE.check_world(options, World((Host("node1", 2), Host("node2", 2)), "hf"))


def test_the_same_work_is_pytorch_ddps_in_float32():
    ours, theirs = CASE.parse_options(["--same-work"]), load_case("pytorch-ddp").parse_options(["--same-work"])
    shared = ("model", "data", "num-classes", "image-size", "batch-size", "num-warmup-batches",
              "num-batches-per-iter", "num-iters")
    assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared} and ours["precision"] == "fp32"
