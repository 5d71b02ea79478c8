"""jax-resnet: a real run of the Flax ResNet-50 v1.5 on this machine's CPUs through the suite's CLI, two processes
joined by jax.distributed (Gloo between them) in one mesh of both devices: images/s, the loss falls, and XLA's FLOP
count of the compiled step, the same on both processes, beside the count the PyTorch cases report. The model itself
against torchvision's numbers: its parameters and its FLOPs as torch.utils.flop_counter counts them."""

import json
import math
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, installed_stack, records_in, small_jpeg_tree, tiny

from suite.records.schema import validate

CASE = ("--case", "jax-resnet")
# ResNet-50 v1.5 at [tiny]'s 32 px and 4 classes: a training step's products per image as pytorch-ddp's
# FlopCounterMode counts them (its cached figure at 3 classes, 495,685,632, plus the head's 6 x 2,048).
KNOWN_FLOPS = 495_697_920
# XLA counts only the taps of a window that fall inside the input: at 32 px the last stages are 2 x 2 and 1 x 1,
# so most of a 3 x 3 convolution's taps are padding (18% fewer products than the count above, 1.5% fewer at
# 224 px); it adds the normalisation and SGD's update of 23.5 M parameters over 2 images (+12%). jax 0.10.2: 6% under.
XLA_UNDER_KNOWN = 0.10


@pytest.fixture(scope="module")
def jax_stack():
    """The real jax stack (jax[cpu], flax, optax), installed once."""
    return installed_stack("jax")


@pytest.fixture(scope="module")
def jpeg_tree(tmp_path_factory, jax_stack) -> Path:
    """pytorch-ddp's data script in the jax stack (`make data CASE=jax-resnet SYNTHETIC=1`), small."""
    return small_jpeg_tree("jax-resnet", tmp_path_factory.mktemp("jax-data"))


def test_two_processes_train_resnet50_in_images_per_second(suite_cli, jax_stack):
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", case_args=tiny("jax-resnet"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok" and record["reason"] is None
    reported, [results] = record["config"]["reported_by_case"], record["metrics"]["results"]
    assert record["execution"]["launcher"] == "jaxdist" and record["execution"]["processes"] == 2
    assert (reported["processes"], reported["devices"], reported["global_batch"]) == (2, 2, 4)
    assert record["config"]["model"] == "resnet50-v1.5" and record["config"]["image_size"] == 32
    tp = record["metrics"]["throughput"]
    assert tp["unit"] == "img/s" and tp["n"] == 3 and all(s > 0 for s in tp["samples"])
    assert "img/s total" in result.stdout and "MFU " in result.stdout
    losses = results["first_losses"]
    assert results["steps"] == 7 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert results["compile_seconds"] > 0 and len(results["peak_memory_bytes"]) == 2
    assert results["formula_flops_per_image"] == KNOWN_FLOPS
    assert record["metrics"]["utilisation"]["flops_per_sample"] == KNOWN_FLOPS
    counted = {line["rank"]: line["metrics"]["counted_flops_per_image"] for line in rank_results(suite_cli, record)}
    assert set(counted) == {0, 1} and counted[0] == counted[1] == results["counted_flops_per_image"]
    assert KNOWN_FLOPS * (1 - XLA_UNDER_KNOWN) < counted[0] < KNOWN_FLOPS


def rank_events(suite_cli, record) -> list[dict]:
    """Every process's probe lines, from the run's per-rank files."""
    paths = sorted((suite_cli.runs / record["run_id"]).glob("rep-0/ranks/rank-*.jsonl"))
    return [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]


def rank_results(suite_cli, record) -> list[dict]:
    """Each process's result line that holds XLA's count."""
    return [e for e in rank_events(suite_cli, record) if e["event"] == "result" and "counted_flops_per_image" in
            e["metrics"]]


MODEL_CHECK = """
import jax, jax.numpy as jnp
from resnet import ResNet, training_flops_per_image
def parameters(model):
    init = lambda key: ResNet(model, 1000).init(key, jnp.zeros((1, 224, 224, 3)), train=False)
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(jax.eval_shape(init, jax.random.PRNGKey(0))["params"]))
print(parameters("resnet50"), parameters("resnet18"), training_flops_per_image("resnet50", 32, 1000),
      training_flops_per_image("resnet50", 16, 1000))
"""


def test_the_model_has_torchvisions_parameters_and_flops(jax_stack):
    """torchvision's ResNet-50 (25,557,032) and ResNet-18 (11,689,512) parameters; the FLOPs pytorch-ddp's
    FlopCounterMode counts at 32 and 16 px, 1000 classes (2,031,747,072 over a batch of 4; 402,161,664 over 2)."""
    out = subprocess.run([str(jax_stack.python), "-c", MODEL_CHECK], cwd=ROOT / "cases" / "jax-resnet",
                         capture_output=True, text=True, timeout=300, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["25557032", "11689512", str(2_031_747_072 // 4), str(402_161_664 // 2)]


def test_two_processes_train_on_the_jpeg_folders_each_its_share(suite_cli, jax_stack, jpeg_tree):
    """--data imagefolder: the tree's classes, the wait for each batch apart from the step; 8 batches of 2 a process
    (the compile's, 1 warmup, 3 x 2 timed) over shares of 12 images: a second, reshuffled epoch."""
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", "--data-dir", str(jpeg_tree),
                       # the input pipeline is tested, not the model: ResNet-18 compiles in half ResNet-50's time
                       case_args=(*tiny("jax-resnet", model="resnet18"), "--data", "imagefolder", "--workers", "2"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "ok", record["reason"]
    reported = record["config"]["reported_by_case"]
    assert record["config"]["data"] == "imagefolder-synthetic" and reported["classes"] == 3
    assert reported["data_path"] == str((jpeg_tree / "imagefolder" / "train").resolve())
    assert reported["decoding_threads"] == 2 and record["metrics"]["throughput"]["n"] == 3
    [results] = record["metrics"]["results"]
    losses = results["first_losses"]
    assert len(losses) == 7 and all(math.isfinite(v) for v in losses)
    waits = [event["data_wait_s"] for event in rank_events(suite_cli, record) if event["event"] == "iteration"]
    assert len(waits) == 6 and all(w >= 0 for w in waits)  # each timed iteration of each process


SHARES = """
import json, sys
sys.path[:0] = [".", "cases/jax-resnet"]
from pipeline import ImageFolderBatches
root, seen = sys.argv[1], {}
for rank in range(2):
    batches = ImageFolderBatches(root, 32, 4, rank, 2, threads=2, seed=5)
    epochs = [[batches.samples[i][0] for i in batches.epoch_share(epoch)] for epoch in range(2)]
    read = [batches.samples[i][0] for i in [*batches.pending_indices, *batches.queued]]
    images, labels = next(batches)
    batches.close()
    seen[rank] = {"epochs": epochs, "read": read, "shape": list(images.shape), "dtype": str(images.dtype),
                  "labels": labels.tolist(), "mean": float(images.mean())}
json.dump(seen, sys.stdout)
"""


def test_each_process_reads_its_own_share_reshuffled_every_epoch(jax_stack, jpeg_tree):
    done = subprocess.run([str(jax_stack.python), "-c", SHARES, str(jpeg_tree / "imagefolder" / "train")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    first, second = (set(seen[r]["epochs"][0]) for r in ("0", "1"))
    assert len(first) == len(second) == 12 and not first & second  # 24 images: 12 each, none read twice
    assert seen["0"]["epochs"][0] != seen["0"]["epochs"][1]  # the next epoch in another order
    assert set(seen["0"]["epochs"][1]) | set(seen["1"]["epochs"][1]) == first | second
    assert seen["0"]["read"] == seen["0"]["epochs"][0]  # what it reads: the first epoch's share, in that order
    assert seen["0"]["shape"] == [4, 32, 32, 3] and seen["0"]["dtype"] == "float32"
    assert all(0 <= label < 3 for label in seen["0"]["labels"]) and abs(seen["0"]["mean"]) < 3  # normalised


def test_imagefolder_without_data_is_refused_before_launch(suite_cli, tmp_path):
    result = suite_cli("run", *CASE, "--data-dir", str(tmp_path), case_args=("--data", "imagefolder"))
    assert result.returncode == 2 and "data missing" in result.stderr and "imagefolder/train" in result.stderr
    assert not suite_cli.runs.exists()
