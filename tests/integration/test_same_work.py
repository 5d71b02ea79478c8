"""The same work in every framework: `--same-work` and each case's [same_work] table, the
Keras, Gluon and Flax ResNet-50 v1.5 (and the Keras ResNet-18) against the PyTorch cases' model (parameters,
every weight's name and shape, the same logits for the same weights), `compare-frameworks` at tiny sizes,
its table on the report's frameworks page, and the report over its records and a run of each other case
(every case's real record, rendered in headless Chromium)."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHROMIUM_FLAGS, ROOT, install_stacks_of, installed_stack, records_in, tiny
from support.fixture_records import make_record

from suite.analysis.report import write_report
from suite.analysis.same_work import build_rows, format_table
from suite.base.errors import UsageError
from suite.execution.same_work_runs import same_work_cases
from suite.inputs.cases import known_cases, load_case
from suite.instack.case_options import parse_case_args
from suite.records.read import Point

CASES = {"jax-resnet", "mxnet-imagenet", "pytorch-ddp", "pytorch-synthetic", "tf-cifar"}
RESNET50_V15 = 25_557_032
RESNET18 = 11_689_512  # torchvision's resnet18()
# Each case's options that make "batch 32 per device, 224 px, 1000 classes, float32, synthetic data".
EXPECTED = {
    "pytorch-synthetic": {"model": "resnet50", "batch-size": 32, "image-size": 224, "num-classes": 1000,
                          "amp": False},
    "pytorch-ddp": {"model": "resnet50", "data": "synthetic", "batch-size": 32, "image-size": 224,
                    "num-classes": 1000, "amp": False},
    "mxnet-imagenet": {"model": "resnet50-v1.5", "benchmark": True, "batch-size": 0, "batch-per-device": 32,
                       "image-size": 224, "num-classes": 1000, "dtype": "float32"},
    "tf-cifar": {"model": "resnet50-v1.5", "synthetic-input": True, "batch-size": 32, "image-size": 224,
                 "num-classes": 1000},
    "jax-resnet": {"model": "resnet50", "data": "synthetic", "batch-size": 32, "image-size": 224,
                   "num-classes": 1000, "precision": "fp32"},
}


# --- the switch (no stacks) ------------------------------------------------------------------------

def test_every_framework_case_declares_the_same_work(tmp_path):
    assert set(same_work_cases()) == CASES
    for name in CASES:
        case = load_case(name)
        options = case.parse_options(["--same-work"])
        assert options["same-work"] is True
        assert {k: options[k] for k in EXPECTED[name]} == EXPECTED[name], name
        case.check_data(options, tmp_path / "no-data")  # synthetic input: no data needed
        assert case.parse_options([])["same-work"] is False


def test_later_options_win_and_the_script_expands_the_same_way():
    case = load_case("tf-cifar")
    runner = case.parse_options(["--same-work", "--image-size", "64"])
    script = parse_case_args(str(case.script), ["--same-work", "--image-size", "64"])
    assert runner["image-size"] == script.image_size == 64
    assert runner["batch-size"] == script.batch_size == 32 and script.same_work and script.synthetic_input


# --- the table -------------------------------------------------------------------------------------

def same_work_point(tmp_path: Path, case: str, devices: int = 1, per_device: float = 10.0, **config) -> Point:
    record = make_record(tmp_path / "results", tmp_path / "runs", case=case, devices=devices,
                         per_device=(per_device,))
    record["config"]["options"]["same-work"] = True
    record["config"].update({"model": "resnet50-v1.5", "image_size": 224, "parameters": RESNET50_V15, **config})
    return Point(record, f"{record['run_id']}.json")


def test_a_row_with_another_configuration_is_flagged_and_sweeps_get_efficiency(tmp_path):
    points = [same_work_point(tmp_path, "pytorch-synthetic"),
              same_work_point(tmp_path, "pytorch-synthetic", devices=2, per_device=9.0),
              same_work_point(tmp_path, "pytorch-ddp"),
              same_work_point(tmp_path, "tf-cifar", parameters=RESNET50_V15 + 53_120, batch_per_device=8)]
    rows = build_rows(points)
    assert [(r.point.case, r.point.devices) for r in rows] == [
        ("pytorch-ddp", 1), ("pytorch-synthetic", 1), ("pytorch-synthetic", 2), ("tf-cifar", 1)]
    assert [r.differs for r in rows[:3]] == ["", "", ""]
    assert rows[3].differs == "batch 8 vs 32; parameters 25610152 vs 25557032"
    assert rows[0].efficiency is None and rows[1].efficiency == pytest.approx(100)
    assert rows[2].efficiency == pytest.approx(90, rel=0.02)
    table = format_table(rows)
    assert table.splitlines()[-2].endswith("DIFFERS: batch 8 vs 32; parameters 25610152 vs 25557032")
    assert "1 of 4 row(s) differ" in table


def test_frameworks_page_shows_the_same_work_table_first(tmp_path):
    record = make_record(tmp_path / "results", tmp_path / "runs", case="pytorch-ddp")
    path = tmp_path / "results" / f"{record['run_id']}.json"
    record["config"]["options"]["same-work"] = True
    record["config"].update(model="resnet50-v1.5", parameters=RESNET50_V15)
    path.write_text(json.dumps(record))
    write_report(tmp_path / "results", tmp_path / "report", warn=lambda m: None)
    page = (tmp_path / "report" / "frameworks.html").read_text()
    table = page.index("<h2>The same work in every framework</h2>")
    assert table < page.index('class="plot"')
    assert "25,557,032" in page[table:] and "1 row(s), all the same configuration" in page


# --- the models in their stacks --------------------------------------------------------------------

TORCH_WEIGHTS = """
import sys, numpy, torch
sys.path[:0] = [".", "tools"]
from cases._shared.torch_resnet import MODELS
from torchvision_reference import set_deterministic_weights
model = MODELS[sys.argv[2]]()
set_deterministic_weights(model)
model.eval()
images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1234))
with torch.no_grad():
    logits = model(images).numpy()
state = {k: v.numpy() for k, v in model.state_dict().items() if v.is_floating_point()}
numpy.savez(sys.argv[1], images=images.numpy(), logits=logits, **state)
"""

KERAS = """
import json, sys, numpy
sys.path[:0] = ["cases/tf-cifar"]
import tf_keras as keras
import keras_resnet as r
state = numpy.load(sys.argv[1])
model = getattr(r, sys.argv[2])(1000, (64, 64, 3))
for name, weight, axes in r.torch_weights(model):
    weight.assign(state[name].transpose(numpy.argsort(axes)) if axes else state[name])
logits = keras.Model(model.input, model.get_layer("fc").output)(state["images"].transpose(0, 2, 3, 1), training=False)
print(json.dumps({"parameters": r.parameter_count(model), "shapes": r.torch_shapes(model),
                  "logits": logits.numpy().tolist()}))
"""

GLUON = """
import json, sys, numpy
sys.path[:0] = ["cases/mxnet-imagenet"]
import mxnet as mx
import gluon_resnet as r
state = numpy.load(sys.argv[1])
net = r.ResNet50V15(1000)
net.initialize()
for name, param in r.torch_params(net):
    param.set_data(mx.nd.array(state[name]))
net.hybridize()
print(json.dumps({"parameters": r.parameter_count(net), "shapes": r.torch_shapes(net),
                  "logits": net(mx.nd.array(state["images"])).asnumpy().tolist()}))
"""


FLAX = """
import json, sys, numpy
sys.path[:0] = ["cases/jax-resnet"]
import jax
import resnet as r
from flax.core import unfreeze
state = numpy.load(sys.argv[1])
images = state["images"].transpose(0, 2, 3, 1)
model = r.ResNet("resnet50", 1000)
variables = jax.tree_util.tree_map(numpy.asarray, unfreeze(model.init(jax.random.PRNGKey(0), images, train=False)))
shapes = {}
for name, collection, path, axes in r.torch_weights("resnet50"):
    *parents, leaf = path
    holder = variables[collection]
    for key in parents:
        holder = holder[key]
    holder[leaf] = state[name].transpose(numpy.argsort(axes)) if axes else state[name]
    shapes[name] = list(holder[leaf].transpose(axes).shape) if axes else list(holder[leaf].shape)
parameters = sum(int(x.size) for x in jax.tree_util.tree_leaves(variables["params"]))
logits = model.apply(variables, images, train=False)
print(json.dumps({"parameters": parameters, "shapes": shapes, "logits": numpy.asarray(logits).tolist()}))
"""


def torch_weights_of(pytorch_stack, folder: Path, model: str) -> Path:
    """A model of the PyTorch cases with deterministic weights, its input and its logits."""
    path = folder / f"{model}.npz"
    subprocess.run([str(pytorch_stack.python), "-c", TORCH_WEIGHTS, str(path), model], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="module")
def torch_weights(pytorch_stack, tmp_path_factory) -> Path:
    return torch_weights_of(pytorch_stack, tmp_path_factory.mktemp("weights"), "resnet50")


def stack_python(name: str) -> Path:

    return installed_stack(name).python


@pytest.mark.parametrize("stack, code", [("tensorflow", KERAS), ("mxnet", GLUON), ("jax", FLAX)],
                         ids=["keras", "gluon", "flax"])
def test_resnet50_v15_equals_the_pytorch_model(stack, code, torch_weights):
    ours = model_in_stack(stack, code, torch_weights, "resnet50_v15")
    reference = json.loads((ROOT / "tests" / "data" / "torchvision_resnet50.json").read_text())["state_dict"]
    assert ours["parameters"] == RESNET50_V15
    # Every weight under PyTorch's name with PyTorch's shape (the batch counter is PyTorch's own).
    assert ours["shapes"] == {k: v for k, v in reference.items() if not k.endswith("num_batches_tracked")}
    # Same weights, same outputs: padding, strides and batch normalisation (eval) as in PyTorch.
    assert_same_logits(ours, torch_weights)


def model_in_stack(stack: str, code: str, weights: Path, model: str) -> dict:
    """The model's parameter count, weight shapes and logits as `code` builds it in the stack with `weights`;
    `model` names the keras_resnet builder the Keras script calls (the Gluon and Flax scripts build ResNet-50
    v1.5 alone)."""
    out = subprocess.run([str(stack_python(stack)), "-c", code, str(weights), model], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def assert_same_logits(ours: dict, weights: Path) -> None:
    """Our logits are PyTorch's for the same weights and input, within 1e-4 of their largest."""
    import numpy

    expected = numpy.load(weights)["logits"]
    assert numpy.abs(numpy.array(ours["logits"]) - expected).max() < 1e-4 * numpy.abs(expected).max()


def test_keras_resnet18_equals_the_pytorch_cases_resnet18(pytorch_stack, tmp_path):
    import numpy

    weights = torch_weights_of(pytorch_stack, tmp_path, "resnet18")
    ours = model_in_stack("tensorflow", KERAS, weights, "resnet18")
    assert ours["parameters"] == RESNET18
    state = numpy.load(weights)
    assert ours["shapes"] == {name: list(state[name].shape) for name in state.files if name not in ("images", "logits")}
    assert_same_logits(ours, weights)


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """`compare-frameworks --tiny` once: its output and its results folder (read by the report below)."""
    base = tmp_path_factory.mktemp("compared")
    results = base / "results"
    install_stacks_of(same_work_cases())  # made here, not in a timed run
    done = subprocess.run([sys.executable, "-m", "suite", "compare-frameworks", "--tiny", "--gpus-per-node", "1",
                           "--results-dir", str(results), "--runs-dir", str(base / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=2400)
    return done, results


def test_compare_frameworks_at_tiny_sizes_runs_every_case(compared):
    out, results = compared
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = records_in(results)
    assert {r["case"] for r in records} == CASES and len(records) == len(CASES)
    for record in records:
        cfg = record["config"]
        assert record["status"] == "ok" and cfg["options"]["same-work"] is True
        assert (cfg["model"], cfg["parameters"], cfg["image_size"], cfg["batch_per_device"], cfg["dtype"],
                cfg["data"]) == ("resnet50-v1.5", RESNET50_V15, 32, 4, "float32", "synthetic"), record["case"]
        assert "--same-work" in record["provenance"]["argv"]  # a `suite run` line: rerun can repeat it
    table = out.stdout[out.stdout.index("case  "):].splitlines()
    rows = [line for line in table[1:] if line.split()[0] in CASES]
    assert len(rows) == len(CASES) and all("25,557,032" in row and "DIFFERS" not in row for row in rows)
    assert f"{len(CASES)} row(s), all the same configuration" in out.stdout


def test_report_on_real_runs_of_every_case(compared, tmp_path, chromium):
    """The report over a real record of every case: the compared frameworks' ResNet-50 runs above, and a
    [tiny] run of each other case (the token cases)."""
    done, compared_results = compared
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results, runs, data = tmp_path / "results", tmp_path / "runs", tmp_path / "data"
    shutil.copytree(compared_results, results)

    def suite(*args):
        done = subprocess.run([sys.executable, "-m", "suite", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr

    for name in sorted(set(known_cases()) - CASES):
        case = load_case(name)
        without_data = case.spec.get("data", {}).get("unless_option")  # e.g. mxnet's --benchmark
        args = tiny(name, **({without_data: True} if without_data else {}))
        try:
            case.check_data(case.parse_options(list(args)), data)
        except UsageError:  # the case reads data at these sizes: a small generated set
            suite("data", "--case", name, "--synthetic", "--data-dir", str(data))
        suite("run", "--case", name, "--results-dir", str(results), "--runs-dir", str(runs), "--data-dir", str(data),
              "--", *args)
    out = tmp_path / "site"
    suite("report", "--results-dir", str(results), "--out", str(out))
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert sorted(r["case"] for r in rows) == known_cases()
    assert all(float(r["throughput"]) > 0 for r in rows)
    image_cases = [r for r in rows if r["case"] in ("pytorch-synthetic", "pytorch-ddp", "tf-cifar", "mxnet-imagenet")]
    assert len(image_cases) == 4 and all(float(r["flops_per_sample"]) > 0 and float(r["mfu_measured"]) > 0
                                         for r in image_cases)  # every case says what its step costs
    assert float(next(r for r in rows if r["case"] == "tf-cifar")["epoch_seconds"]) > 0
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        tab = browser.new_page()
        # Case pages: their charts and the telemetry of their latest run.
        # throughput, MFU, speedup, efficiency, (epoch time), telemetry; the frameworks page's runs are all at
        # one device count: its throughput, and a sentence where speedup and efficiency would be
        for page, plots in [("case-tf-cifar.html", 6), ("case-mxnet-imagenet.html", 5), ("frameworks.html", 1)]:
            tab.goto((out / page).as_uri())
            tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
            assert len(tab.query_selector_all(".js-plotly-plot")) == plots, page
        assert "Speedup and efficiency need runs at two or more device counts" in tab.content()
        browser.close()
