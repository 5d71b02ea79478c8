"""`suite containers build --jobs N`: the first image alone (it makes the base), the others N at a time (those
that compile from source first), each line of a parallel build led by its flavour, the metadata in the
flavours' order; a bad N refused."""

import threading
from types import SimpleNamespace

import pytest

from suite.base.errors import UsageError
from suite.execution import image_builds
from suite.stacks.images import BuildInputs


class Builder:
    """A runtime whose builds (but the first) wait, up to 120 s, for `together` of them to run at
    once, noting how many ran at once and with which inputs: a loaded machine cannot make it miss a count."""

    def __init__(self, together: int):
        self.together, self.running, self.most, self.inputs, self.started = together, 0, 0, {}, []
        self.changed = threading.Condition()

    def build_image(self, fl, inputs, log):
        with self.changed:
            self.running += 1
            self.most = max(self.most, self.running)
            self.changed.notify_all()
            if fl is not FLAVOURS[0]:
                self.changed.wait_for(lambda: self.most >= self.together, timeout=120)
        log(f"containers: building {fl.id}")
        with self.changed:
            self.started.append(fl.id)
            self.running -= 1
            self.inputs[fl.id] = inputs
        return {"stack": fl.id}


FLAVOURS = [SimpleNamespace(id=f"stack{i}-cpu", stack=SimpleNamespace(post_install=None)) for i in range(5)]


@pytest.mark.parametrize("jobs, most", [(1, 1), (2, 2), (8, 4)])
def test_the_first_image_alone_then_the_others_jobs_at_a_time(jobs, most):
    builder, lines = Builder(together=most), []
    first = BuildInputs("debian", True, "http://127.0.0.1:1/")
    made = image_builds.built_in_turns(builder, FLAVOURS, first, jobs, lines.append)
    assert made == [{"stack": fl.id} for fl in FLAVOURS]
    assert builder.most == most
    assert lines[0] == "containers: building stack0-cpu"  # alone, before the others started
    assert builder.inputs["stack0-cpu"].refresh_base is True
    assert all(builder.inputs[fl.id].refresh_base is False for fl in FLAVOURS[1:])  # the base made once
    for line in lines[1:]:  # a parallel build's lines say whose they are
        built = line.rsplit(" ", 1)[1]
        assert line == (f"[{built}] " if jobs > 1 else "") + f"containers: building {built}"


def test_an_image_that_compiles_from_source_starts_right_after_the_first():
    compiled = SimpleNamespace(id="compiled-cpu", stack=SimpleNamespace(post_install="post-install.sh"))
    flavours = [*FLAVOURS[:3], compiled, *FLAVOURS[3:]]
    builder = Builder(together=1)
    made = image_builds.built_in_turns(builder, flavours, BuildInputs("debian"), 1, lambda line: None)
    assert builder.started == ["stack0-cpu", "compiled-cpu", "stack1-cpu", "stack2-cpu", "stack3-cpu", "stack4-cpu"]
    assert made == [{"stack": fl.id} for fl in flavours]


def test_jobs_below_one_are_refused_before_anything_is_built():
    with pytest.raises(UsageError, match="--jobs must be 1 or more, got 0"):
        image_builds.build("pytorch", "cpu", "docker", "debian", jobs=0)
