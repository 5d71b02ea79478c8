"""tf-cifar: the CIFAR-10 format, the tf.data pipeline, TF_CONFIG planning, and real runs of the case
(MirroredStrategy with 1 and 2 replicas, MultiWorkerMirroredStrategy with 2 workers on loopback hosts)."""

import hashlib
import importlib.util
import json
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from conftest import ROOT, installed_stack, records_in, tiny

from suite.execution.interconnect_check import message_sizes
from suite.execution.plan import Launch, StackEnv
from suite.inputs.cases import load_case
from suite.inputs.host_network import is_local
from suite.inputs.hostfiles import Host, World
from suite.instack.tf_cluster import worker_rank
from suite.launchers import tfdist
from suite.records.schema import validate

CASE_DIR = ROOT / "cases" / "tf-cifar"
TINY = tiny("tf-cifar")
TRAIN_PER_BATCH, TEST_IMAGES = 16, 16  # 80 training images: 10 steps of 8, or 5 of 2 x 8


def case_module(name: str):
    spec = importlib.util.spec_from_file_location(f"tf_cifar_{name}", CASE_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cifar = case_module("cifar")


@pytest.fixture(scope="session")
def tensorflow_stack():
    """The real tensorflow stack, installed once (about a minute on a fresh machine)."""
    return installed_stack("tensorflow")


def in_stack(stack, code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs `code` with the stack's python, the case folder first on sys.path."""
    prelude = f"import sys; sys.path[:0] = [{str(CASE_DIR)!r}, {str(ROOT)!r}]\n"
    return subprocess.run([str(stack.python), "-c", prelude + code, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


# --- the on-disk format (numpy only, in this process) ---------------------------------------------

def test_batch_rows_are_colour_planes(tmp_path):
    rows = np.concatenate([np.full(1024, 10), np.full(1024, 20), np.full(1024, 30)]).astype(np.uint8)[None]
    with open(tmp_path / "data_batch_1", "wb") as f:
        pickle.dump({b"data": rows, b"labels": [7], b"batch_label": b"x"}, f, protocol=2)
    split = cifar.read_batch(tmp_path / "data_batch_1")
    assert split.images.shape == (1, 32, 32, 3) and split.images.dtype == np.uint8
    assert split.images[0, 5, 9].tolist() == [10, 20, 30] and split.labels.tolist() == [7]


def test_synthetic_set_has_the_official_layout_and_reads_back(tmp_path):
    cifar.write_synthetic(tmp_path, per_batch=12, test=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(cifar.FILES)
    with open(tmp_path / "data_batch_3", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    assert raw[b"data"].shape == (12, 3072) and raw[b"data"].dtype == np.uint8 and len(raw[b"labels"]) == 12
    data = cifar.load(tmp_path)
    assert data.train.images.shape == (60, 32, 32, 3) and data.test.images.shape == (7, 32, 32, 3)
    assert data.train.labels.dtype == np.int32 and set(data.train.labels) <= set(range(10))
    assert data.synthetic and data.source == "synthetic-cifar-format"
    prints = cifar.fingerprints(tmp_path)
    assert set(prints) == set(cifar.FILES)
    assert prints["test_batch"] == hashlib.sha256((tmp_path / "test_batch").read_bytes()).hexdigest()


def test_broken_batches_are_named(tmp_path):
    cifar.write_synthetic(tmp_path, per_batch=2, test=2)
    (tmp_path / "data_batch_2").write_bytes(b"not a pickle")
    with pytest.raises(cifar.DataError, match="data_batch_2 is not a CIFAR-10 python batch"):
        cifar.load(tmp_path)
    (tmp_path / "test_batch").unlink()
    with pytest.raises(cifar.DataError, match="test_batch is missing"):
        cifar.read_batch(tmp_path / "test_batch")


# --- TF_CONFIG and the launch plan -----------------------------------------------------------------

def launch(tmp_path, *hosts: Host) -> Launch:
    env = StackEnv(runtime="local", bin_dir="/stack/bin", env={"PYTHONPATH": "/suite"})
    return Launch("/cases/tf-cifar/train.py", ["--epochs", "2"], World(hosts, "hf"), env, str(tmp_path), "/data")


def test_one_node_is_one_mirrored_process_without_tf_config(tmp_path):
    plan = tfdist.plan(launch(tmp_path, Host("localhost", 2)))
    [process] = plan.processes
    assert process.name == "worker-0" and plan.ranks == 1
    assert process.argv == ["/stack/bin/python", "/cases/tf-cifar/train.py", "--epochs", "2"]
    assert "TF_CONFIG" not in process.env and process.env["SUITE_DEVICES_PER_NODE"] == "2"
    assert plan.details == {"launcher": "tfdist", "strategy": "MirroredStrategy"}


def test_tf_config_names_the_first_host_chief_and_free_ports(tmp_path):
    plan = tfdist.plan(launch(tmp_path, Host("127.0.0.1", 1), Host("127.0.0.2", 1), Host("127.0.0.3", 1)))
    configs = [json.loads(p.env["TF_CONFIG"]) for p in plan.processes]
    assert [p.name for p in plan.processes] == ["worker-0", "worker-1", "worker-2"] and plan.ranks == 3
    spec = configs[0]["cluster"]
    assert all(c["cluster"] == spec for c in configs) and plan.details["tf_cluster"] == spec
    assert [a.rsplit(":", 1)[0] for a in spec["chief"] + spec["worker"]] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    ports = [int(a.rsplit(":", 1)[1]) for a in spec["chief"] + spec["worker"]]
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                           {"type": "worker", "index": 1}]
    # The case reads its rank back from the same TF_CONFIG: chief 0, then the workers in host order.
    assert [worker_rank(c) for c in configs] == [(0, 3), (1, 3), (2, 3)]
    assert worker_rank(None) == (0, 1)
    # All loopback hosts are this machine: the case splits its cores three ways.
    assert {p.env["SUITE_PROCESSES_ON_HOST"] for p in plan.processes} == {"3"}


def test_remote_hosts_each_run_one_process(tmp_path):
    plan = tfdist.plan(launch(tmp_path, Host("node1.cluster", 4), Host("node2.cluster", 4)))
    assert [p.host for p in plan.processes] == ["node1.cluster", "node2.cluster"]
    assert {p.env["SUITE_PROCESSES_ON_HOST"] for p in plan.processes} == {"1"}
    assert {p.env["SUITE_DEVICES_PER_NODE"] for p in plan.processes} == {"4"}
    assert not is_local("node1.cluster") and is_local("127.0.0.2") and is_local("localhost")


# --- data preparation (the case's data.py in its stack) ---------------------------------------------

PREPARE = """
import data
for name, value in (a.split("=", 1) for a in sys.argv[1:] if "=" in a):
    setattr(data, name, value)
sys.exit(data.main([a for a in sys.argv[1:] if "=" not in a]))
"""


def test_make_data_synthetic_writes_what_run_requires(suite_cli, tensorflow_stack, tmp_path):
    result = suite_cli("data", "--case", "tf-cifar", "--synthetic", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "500 training and 100 test images" in result.stdout
    required = load_case("tf-cifar").spec["data"]["requires"]
    assert required and all((tmp_path / path).is_file() for path in required)
    assert cifar.load(tmp_path / "cifar-10-batches-py").synthetic


def test_download_without_network_fails_fast_and_says_what_to_do(tensorflow_stack, tmp_path):
    unreachable = "URL=http://127.0.0.1:9/cifar-10-python.tar.gz"  # nothing listens on the discard port
    result = in_stack(tensorflow_stack, PREPARE, "--data-dir", str(tmp_path), unreachable, timeout=60)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: make data CASE=tf-cifar: cannot download")
    assert "SRC=" in line and "SYNTHETIC=1" in line
    assert not list(tmp_path.glob("*.part"))


def test_archive_is_checked_then_unpacked(tensorflow_stack, tmp_path):
    # An archive laid out like the official one, its files made to look real (no synthetic mark).
    folder = tmp_path / "src" / "cifar-10-batches-py"
    cifar.write_synthetic(folder, per_batch=3, test=3)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [n.encode() for n in cifar.LABEL_NAMES]}, f, protocol=2)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    target = tmp_path / "data"

    wrong = in_stack(tensorflow_stack, PREPARE, "--data-dir", str(target), "--src", str(archive))
    assert wrong.returncode == 1 and "is not the published c58f30108f718f92721af3b95e74349a" in wrong.stderr
    assert not (target / "cifar-10-batches-py").exists()

    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    right = in_stack(tensorflow_stack, PREPARE, "--data-dir", str(target), "--src", str(archive), f"MD5={md5}")
    assert right.returncode == 0, right.stderr
    data = cifar.load(target / "cifar-10-batches-py")
    assert not data.synthetic and data.source == "cifar-10" and len(data.train.labels) == 15

    refused = in_stack(tensorflow_stack, PREPARE, "--data-dir", str(target), "--synthetic")
    assert refused.returncode == 1 and "holds the real CIFAR-10" in refused.stderr


# --- the tf.data pipeline (in the stack) -------------------------------------------------------------

PIPELINE = """
import json
import numpy as np
import tensorflow as tf
import cifar, pipeline

def coded(count):  # every pixel of image i is 8 * i, its label i % 10: pairs can be checked after shuffling
    images = np.repeat(8 * np.arange(count, dtype=np.uint8), 32 * 32 * 3).reshape(count, 32, 32, 3)
    return cifar.Split(images, (np.arange(count) % 10).astype(np.int32))

out = {}
images, labels = next(iter(pipeline.training(coded(20), 48, 6, cache=True, shuffle_buffer=20)))
pixels = np.rint((images.numpy() + 1) * 127.5).astype(int)
out["shape"], out["dtype"], out["label_dtype"] = images.shape.as_list(), images.dtype.name, labels.dtype.name
out["uniform"] = all(len(np.unique(p)) == 1 for p in pixels)
out["pairs"] = [[int(p.flat[0]) // 8 % 10, int(l)] for p, l in zip(pixels, labels.numpy())]
out["order"] = [int(p.flat[0]) // 8 for p in pixels]
context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
images, _ = next(iter(pipeline.evaluation(coded(10), 32, 5, context=context)))
out["shard"] = [int(round((float(i.numpy().flat[0]) + 1) * 127.5)) // 8 for i in images]
data = cifar.load(sys.argv[1])
images, labels = next(iter(pipeline.training(data.train, 64, 4, cache=False, shuffle_buffer=8)))
out["real_shape"], out["range"] = images.shape.as_list(), [float(images.numpy().min()), float(images.numpy().max())]
out["labels"] = labels.numpy().tolist()
print(json.dumps(out))
"""


def test_pipeline_resizes_scales_shuffles_and_shards(tensorflow_stack, tmp_path):
    cifar.write_synthetic(tmp_path, per_batch=8, test=4)
    result = in_stack(tensorflow_stack, PIPELINE, str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["shape"] == [6, 48, 48, 3] and out["dtype"] == "float32" and out["label_dtype"] == "int32"
    assert out["uniform"]  # resizing a flat image keeps it flat, and its value survives the [-1, 1] scaling
    assert all(image == label for image, label in out["pairs"])  # labels stay with their images
    assert out["order"] != sorted(out["order"])  # shuffled
    assert out["shard"] == [1, 3, 5, 7, 9]  # the second of two input pipelines reads every second image
    assert out["real_shape"] == [4, 64, 64, 3] and -1.0 <= out["range"][0] < out["range"][1] <= 1.0
    assert all(0 <= label < 10 for label in out["labels"])


# --- real runs through the suite's CLI ---------------------------------------------------------------

@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory, tensorflow_stack):
    """A small generated set, made by the code path of `make data CASE=tf-cifar SYNTHETIC=1`."""
    folder = tmp_path_factory.mktemp("tf-cifar-data")
    command = [sys.executable, "-m", "suite", "data", "--case", "tf-cifar", "--synthetic", "--data-dir", str(folder),
               "--", "--train-per-batch", str(TRAIN_PER_BATCH), "--test-images", str(TEST_IMAGES)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    return folder


# Trainable parameters (as PyTorch counts them) and BatchNormalization's moving statistics, per model.
PARAMETERS = {"resnet50v2": (23_539_850, 45_440), "resnet18": (11_181_642, 9_600)}


def check_common(record: dict, devices: int, model: str = "resnet50v2") -> dict:
    validate(record)
    assert record["status"] == "ok" and record["reason"] is None
    assert record["world"]["devices"] == devices and record["world"]["device_type"] == "cpu"
    cfg = record["config"]
    assert cfg["data"] == "synthetic-cifar-format" and cfg["model"] == model
    assert (cfg["batch_per_device"], cfg["global_batch"], cfg["image_size"]) == (8, 8 * devices, 32)
    reported = cfg["reported_by_case"]
    assert (reported["parameters"], reported["parameters_non_trainable"]) == PARAMETERS[model]
    assert reported["replicas"] == devices
    assert reported["lr"] == pytest.approx(0.01 * devices)
    assert set(reported["data_files_sha256"]) == set(cifar.FILES)
    epochs = record["metrics"]["epochs"]
    assert [e["index"] for e in epochs] == [0, 1]
    for epoch in epochs:
        assert epoch["images"] == 5 * TRAIN_PER_BATCH and epoch["seconds"] > 0
        assert epoch["metrics"]["loss"] > 0 and 0 <= epoch["metrics"]["accuracy"] <= 1
    tp = record["metrics"]["throughput"]
    assert tp["samples"] == [pytest.approx(epochs[1]["throughput"])]  # epoch 2 only: the first is warmup
    assert record["metrics"]["timed_images"] == 5 * TRAIN_PER_BATCH
    [result] = record["metrics"]["results"]
    assert 0 <= result["test_accuracy"] <= 1 and result["test_images_evaluated"] == TEST_IMAGES
    versions = record["provenance"]["versions"]
    assert versions["tensorflow"] == "2.21.0" and versions["tf_keras"] == "2.21.0"
    return reported


@pytest.mark.parametrize("replicas", [2])  # one replica is the same path (test_same_work.py: compare-frameworks)
def test_mirrored_strategy_run(suite_cli, cifar_dir, replicas):
    """ResNet-18: the strategy is tested (the default ResNet50V2 trains in the multi-worker run below);
    two replicas in one process trace the model twice."""
    result = suite_cli("run", "--case", "tf-cifar", "--gpus-per-node", str(replicas), "--data-dir", str(cifar_dir),
                       case_args=tiny("tf-cifar", model="resnet18"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    reported = check_common(record, replicas, "resnet18")
    assert reported["strategy"] == "MirroredStrategy" and reported["workers"] == 1
    assert record["execution"]["strategy"] == "MirroredStrategy"
    assert f"worker 0 of 1: MirroredStrategy, {replicas} replica(s) in sync" in result.stdout
    assert "epoch 2/2" in result.stdout


def test_multi_worker_run_on_loopback_hosts(suite_cli, cifar_dir):
    """Two workers read their shards of the CIFAR files; ResNet-18, as where the other schedulers run the strategy
    (ResNet50V2's graph, twice as long to trace, is test_mirrored_strategy_run's)."""
    result = suite_cli("run", "--case", "tf-cifar", "--nodes", "2", "--hostfile", str(ROOT / "hostfiles" / "loopback"),
                       "--data-dir", str(cifar_dir), case_args=tiny("tf-cifar", model="resnet18"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    reported = check_common(record, 2, model="resnet18")
    assert reported["strategy"] == "MultiWorkerMirroredStrategy" and reported["workers"] == 2
    assert reported["intra_op_threads"] >= 1
    assert record["world"]["hosts"] == ["127.0.0.1", "127.0.0.2"]
    assert record["execution"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert record["repetitions"][0]["exit_codes"] == {"worker-0": 0, "worker-1": 0}
    logs = ROOT / record["repetitions"][0]["run_dir"] / "logs"
    for rank in (0, 1):
        assert f"worker {rank} of 2: MultiWorkerMirroredStrategy" in (logs / f"worker-{rank}.log").read_text()
    # the interconnect check before it (two nodes): the strategy's own all-reduce, one replica per worker
    check = record["metrics"]["interconnect"]
    assert check["status"] == "ok", check["reason"]
    assert (check["exchange"], check["ranks"], check["nodes"]) == ("ring", 2, 2)
    assert check["implementation"].endswith(" MultiWorkerMirroredStrategy all_reduce (ring over gRPC)")
    assert [s["bytes"] for s in check["sizes"]] == message_sizes(23_539_850 * 4)  # case.toml's [scaling]
    assert all(s["busbw_gb_s"] == s["algbw_gb_s"] > 0 for s in check["sizes"])  # 2(n-1)/n = 1 for two


@pytest.mark.parametrize("case_args, message", [
    (("--image-size", "16"), "argument --image-size: must be at least 32"),
    (("--epochs", "1"), "argument --epochs: must be at least 2"),
    (("--model", "vgg16"), "argument --model: invalid choice: 'vgg16'"),
])
def test_bad_options_refused_before_launch(suite_cli, case_args, message):
    result = suite_cli("run", "--case", "tf-cifar", case_args=case_args)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_missing_data_refused_before_launch(suite_cli, tmp_path):
    result = suite_cli("run", "--case", "tf-cifar", "--data-dir", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "data missing under" in result.stderr and "cifar-10-batches-py/data_batch_1 and 6 more" in result.stderr
    assert not suite_cli.runs.exists()


def test_cpu_workers_with_several_devices_fail_with_the_reason(suite_cli, cifar_dir):
    result = suite_cli("run", "--case", "tf-cifar", "--nodes", "2", "--gpus-per-node", "2", "--no-precheck",
                       "--hostfile", str(ROOT / "hostfiles" / "loopback"), "--data-dir", str(cifar_dir), case_args=TINY)
    assert result.returncode == 1
    [record] = records_in(suite_cli.results)
    validate(record)
    assert record["status"] == "failed"
    message = "runs one replica per worker; GPUS_PER_NODE=2 needs GPUs (use GPUS_PER_NODE=1)"
    # Both workers refuse; the reason quotes whichever the scheduler names, its log holds the message.
    logs = ROOT / record["repetitions"][0]["run_dir"] / "logs"
    said = [(logs / f"worker-{rank}.log").read_text() for rank in (0, 1)]
    assert message in record["reason"] or any(message in log for log in said)
    assert all(code != 0 for code in record["repetitions"][0]["exit_codes"].values())
