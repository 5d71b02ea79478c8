"""mxnet-imagenet: RecordIO packing, the pslite launcher's plan, and real runs over ps-lite.

The integration tests use the real mxnet stack, real ps-lite schedulers, servers and workers on
loopback addresses, and a small synthetic ImageNet-style set packed by the case's data.py.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, installed_stack, records_in, tiny

from suite.base.errors import UsageError
from suite.execution.interconnect_check import message_sizes
from suite.execution.plan import Launch, StackEnv
from suite.inputs.cases import load_case
from suite.inputs.hostfiles import Host, World
from suite.launchers import pslite
from suite.records.schema import validate

SCRIPT = str(ROOT / "cases" / "mxnet-imagenet" / "train.py")
CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 3, 8, 2
TINY = tiny("mxnet-imagenet")
LOOPBACK = ("--nodes", "2", "--hostfile", "hostfiles/loopback")
# gluon's resnet50_v1 (stride in the first 1x1 convolution of a block, which has a bias): trainable
# parameters with 1000 classes; each class fewer drops 2048 weights and 1 bias.
RESNET50_V1_PARAMS = 25_575_912


def resnet50_v1_params(classes: int) -> int:
    return RESNET50_V1_PARAMS - 2049 * (1000 - classes)


def launch(hosts, case_argv=(), stack_env=None) -> Launch:
    world = World(tuple(Host(name, slots) for name, slots in hosts), "hf")
    stack_env = stack_env or StackEnv(runtime="local", bin_dir="/stack/bin", env={"PYTHONPATH": "/suite"})
    options = load_case("mxnet-imagenet").parse_options(list(case_argv))
    return Launch(SCRIPT, list(case_argv), world, stack_env, "/runs/r1", "/data", options)


def dmlc(process) -> dict:
    return {k: v for k, v in process.env.items() if k.startswith("DMLC_")}


# --- the launcher's plan (no stack needed) ---

def test_two_nodes_get_a_scheduler_a_server_each_and_a_worker_each():
    plan = pslite.plan(launch([("node1", 4), ("node2", 4)], ["--batch-size", "256"]))
    assert [(p.name, p.host) for p in plan.processes] == [
        ("worker-0", "node1"), ("worker-1", "node2"), ("server-0", "node1"), ("server-1", "node2"),
        ("scheduler", "node1")]
    assert plan.ranks == 2
    assert {tuple(p.argv) for p in plan.processes} == {("/stack/bin/python", SCRIPT, "--batch-size", "256")}
    port = plan.processes[0].env["DMLC_PS_ROOT_PORT"]
    assert port.isdigit() and 0 < int(port) < 65536
    common = {"DMLC_PS_ROOT_URI": "node1", "DMLC_PS_ROOT_PORT": port, "DMLC_NUM_SERVER": "2", "DMLC_NUM_WORKER": "2"}
    assert dmlc(plan.processes[1]) == {**common, "DMLC_ROLE": "worker", "DMLC_NODE_HOST": "node2", "DMLC_TASK_ID": "1"}
    assert dmlc(plan.processes[2]) == {**common, "DMLC_ROLE": "server", "DMLC_NODE_HOST": "node1", "DMLC_TASK_ID": "2"}
    assert dmlc(plan.processes[4]) == {**common, "DMLC_ROLE": "scheduler", "DMLC_NODE_HOST": "node1"}
    worker = plan.processes[1].env
    assert (worker["SUITE_DEVICES_PER_NODE"], worker["SUITE_RUN_DIR"], worker["PYTHONPATH"]) == (
        "4", "/runs/r1", "/suite")
    assert all(p.cwd == "/runs/r1" for p in plan.processes)
    # "ps_root", not "scheduler": the record's execution.scheduler names the suite's scheduler.
    assert plan.details == {"launcher": "pslite", "kvstore": "auto", "servers": 2, "workers": 2,
                            "ps_root": f"node1:{port}"}


def test_servers_are_spread_over_the_hosts():
    plan = pslite.plan(launch([("a", 1), ("b", 1)], ["--num-servers", "3", "--kv-store", "dist_device_sync"]))
    servers = [(p.host, p.env["DMLC_TASK_ID"]) for p in plan.processes if p.env["DMLC_ROLE"] == "server"]
    assert servers == [("a", "2"), ("b", "3"), ("a", "4")]
    assert {p.env["DMLC_NUM_SERVER"] for p in plan.processes} == {"3"}
    assert plan.details["kvstore"] == "dist_device_sync"


def test_one_node_without_a_dist_kvstore_is_one_worker_and_no_ps_lite():
    plan = pslite.plan(launch([("localhost", 2)]))
    [worker] = plan.processes
    assert (worker.name, plan.ranks, dmlc(worker)) == ("worker-0", 1, {})
    assert plan.details == {"launcher": "pslite", "kvstore": "auto", "servers": 0, "workers": 1}
    # A dist kvstore asked for explicitly runs ps-lite even on one node.
    plan = pslite.plan(launch([("localhost", 1)], ["--kv-store", "dist_sync"]))
    assert [p.name for p in plan.processes] == ["worker-0", "server-0", "scheduler"]


def test_a_process_local_kvstore_cannot_span_nodes():
    with pytest.raises(UsageError, match="kv-store local works inside one process; for 2 nodes use dist_sync"):
        pslite.check(launch([("a", 1), ("b", 1)], ["--kv-store", "local"]))


def test_container_prefix_wraps_every_process():
    env = StackEnv(runtime="apptainer", bin_dir="", prefix=("apptainer", "exec", "mx.sif"))
    plan = pslite.plan(launch([("a", 1), ("b", 1)], stack_env=env))
    assert all(p.argv[:5] == ["apptainer", "exec", "mx.sif", "python", SCRIPT] for p in plan.processes)


def test_missing_record_file_is_refused_before_launch(suite_cli, tmp_path):
    result = suite_cli("run", "--case", "mxnet-imagenet", "--data-dir", str(tmp_path), case_args=TINY)
    assert result.returncode == 2
    assert result.stderr.startswith("error: case mxnet-imagenet: data missing under") and result.stderr.count("\n") == 1
    assert "imagenet-rec/train.rec and 1 more" in result.stderr and "SYNTHETIC=1" in result.stderr
    assert not suite_cli.runs.exists()


# --- the real stack ---

@pytest.fixture(scope="session")
def mxnet_stack():
    """The real mxnet stack, installed once (about half a minute on a fresh machine)."""
    return installed_stack("mxnet")


@pytest.fixture(scope="module")
def synthetic_data(mxnet_stack, tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("mxnet-data")
    result = suite("data", "--case", "mxnet-imagenet", "--synthetic", "--data-dir", str(data_dir), "--",
                   "--classes", str(CLASSES), "--train-per-class", str(TRAIN_PER_CLASS),
                   "--val-per-class", str(VAL_PER_CLASS), "--num-thread", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    return data_dir


@pytest.fixture
def no_oversubscription(monkeypatch):
    """Several MXNet processes share this machine's few cores in these tests."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def suite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


def in_stack(stack, code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(stack.python), "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, check=False)


ROUND_TRIP = """
    import json, sys
    from pathlib import Path
    import mxnet as mx
    from PIL import Image

    rec_dir, src = Path(sys.argv[1]), Path(sys.argv[2])
    out = {}
    for split in ("train", "val"):
        if not (rec_dir / f"{split}.rec").exists():
            continue
        lst = [line.split("\\t") for line in (rec_dir / f"{split}.lst").read_text().splitlines()]
        rec = mx.recordio.MXIndexedRecordIO(str(rec_dir / f"{split}.idx"), str(rec_dir / f"{split}.rec"), "r")
        items = []
        for index, label, rel in lst:
            header, jpeg = mx.recordio.unpack(rec.read_idx(int(index)))
            image = mx.image.imdecode(jpeg)  # MXNet's own decoder, as ImageRecordIter uses
            with Image.open(src / split / rel if (src / split).is_dir() else src / rel) as original:
                width, height = original.size
            items.append({"index": int(index), "id": header.id, "label": header.label, "lst_label": float(label),
                          "class": rel.split("/")[0], "shape": list(image.shape), "source": [height, width]})
        out[split] = {"records": len(rec.keys), "items": items}
    print(json.dumps(out))
"""


def round_trip(stack, data_dir: Path, src: Path) -> dict:
    result = in_stack(stack, ROUND_TRIP, str(data_dir / "imagenet-rec"), str(src))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_packed_like_im2rec(split: dict, images: int, shuffled: bool, resize: int = 480) -> None:
    assert split["records"] == len(split["items"]) == images
    classes = sorted({item["class"] for item in split["items"]})
    assert len(classes) == CLASSES
    for item in split["items"]:
        assert item["id"] == item["index"]
        assert item["label"] == item["lst_label"] == classes.index(item["class"])
        height, width, channels = item["shape"]
        src_h, src_w = item["source"]
        assert channels == 3 and min(height, width) == resize
        assert abs(max(height, width) - max(src_h, src_w) * resize / min(src_h, src_w)) <= 1
    labels = [item["label"] for item in split["items"]]
    assert (labels != sorted(labels)) == shuffled


def test_synthetic_set_round_trips_through_recordio(mxnet_stack, synthetic_data):
    manifest = json.loads((synthetic_data / "imagenet-rec" / "manifest.json").read_text())
    assert manifest["synthetic"] and manifest["classes"] == CLASSES and manifest["quality"] == 95
    packed = round_trip(mxnet_stack, synthetic_data, synthetic_data / "imagenet-synthetic-jpeg")
    assert_packed_like_im2rec(packed["train"], CLASSES * TRAIN_PER_CLASS, shuffled=True)
    assert_packed_like_im2rec(packed["val"], CLASSES * VAL_PER_CLASS, shuffled=False)
    sizes = {tuple(item["source"]) for item in packed["train"]["items"]}
    assert len(sizes) > 1, "synthetic images should vary in size"
    assert manifest["splits"]["train"]["images"] == CLASSES * TRAIN_PER_CLASS


def test_src_tree_is_packed_with_the_same_code(mxnet_stack, synthetic_data, tmp_path):
    src = synthetic_data / "imagenet-synthetic-jpeg" / "train"  # class folders directly: a train set only
    result = suite("data", "--case", "mxnet-imagenet", "--src", str(src), "--data-dir", str(tmp_path), "--",
                   "--resize", "64")
    assert result.returncode == 0, result.stderr
    packed = round_trip(mxnet_stack, tmp_path, src)
    assert set(packed) == {"train"}
    assert_packed_like_im2rec(packed["train"], CLASSES * TRAIN_PER_CLASS, shuffled=True, resize=64)
    manifest = json.loads((tmp_path / "imagenet-rec" / "manifest.json").read_text())
    assert manifest["source"] == str(src) and not manifest["synthetic"]


def test_make_data_needs_a_source(mxnet_stack, tmp_path):
    result = suite("data", "--case", "mxnet-imagenet", "--data-dir", str(tmp_path))
    assert result.returncode == 2 and "give exactly one of --src FOLDER (SRC=...) or --synthetic" in result.stderr


def test_a_source_that_is_not_a_folder_is_refused_in_one_line(mxnet_stack, tmp_path):
    """cases/_shared/jpeg_tree.py's check, which pytorch-ddp's data script shares."""
    result = suite("data", "--case", "mxnet-imagenet", "--src", str(tmp_path / "nowhere"),
                   "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f"error: make data CASE=mxnet-imagenet: --src {tmp_path / 'nowhere'} is not a folder "
        "('make data CASE=mxnet-imagenet ARGS=--help' lists the options)"), result.stderr
    assert not (tmp_path / "data").exists()


TRACKER_ENV = """
    import argparse, sys, threading
    threading.Thread.isAlive = threading.Thread.is_alive  # gone since Python 3.9; the tracker still calls it
    from dmlc_tracker import local

    dump = ("import json, os; "
            "json.dump({k: v for k, v in os.environ.items() if k.startswith('DMLC_')}, "
            f"open('{sys.argv[1]}/%d.json' % os.getpid(), 'w'))")
    local.submit(argparse.Namespace(num_workers=2, num_servers=2, command=[sys.executable, "-c", repr(dump)],
                                    local_num_attempt=0))
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join()
"""


def role(env: dict) -> str:
    return env["DMLC_ROLE"] + (f"-{env['DMLC_TASK_ID']}" if "DMLC_TASK_ID" in env else "")


def test_plan_environment_mirrors_the_dmlc_tracker(mxnet_stack, tmp_path):
    """MXNet's own tracker (local submitter) starts 2 workers, 2 servers and its scheduler with a
    command that saves its DMLC_* environment; the plan gives each role the same variables, plus
    DMLC_NODE_HOST as the tracker's ssh submitter sets it. DMLC_JOB_CLUSTER only names the submitter
    (nothing in libmxnet reads it) and is left out."""
    result = in_stack(mxnet_stack, TRACKER_ENV, str(tmp_path))
    assert result.returncode == 0, result.stderr
    tracker = {role(env): env for env in (json.loads(p.read_text()) for p in tmp_path.glob("*.json"))}
    assert sorted(tracker) == ["scheduler", "server-2", "server-3", "worker-0", "worker-1"]
    plan = pslite.plan(launch([("127.0.0.1", 1), ("127.0.0.2", 1)]))
    ours = {role(env): env for env in map(dmlc, plan.processes)}
    assert sorted(ours) == sorted(tracker)
    for name, theirs in tracker.items():
        assert set(ours[name]) == (set(theirs) - {"DMLC_JOB_CLUSTER"}) | {"DMLC_NODE_HOST"}, name
        same = set(theirs) - {"DMLC_JOB_CLUSTER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"}
        assert {k: ours[name][k] for k in same} == {k: theirs[k] for k in same}, name


def survivors(marker: str) -> list[str]:
    """Processes (of any kind) whose environment mentions `marker`, e.g. a run's directory."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name}: {cmdline}")
        except OSError:
            continue
    return found


def run_record(suite_cli, *args, case_args) -> tuple[dict, subprocess.CompletedProcess]:
    result = suite_cli("run", "--case", "mxnet-imagenet", *args, case_args=case_args, timeout=600)
    [record] = records_in(suite_cli.results)
    validate(record)
    assert survivors(str(suite_cli.runs)) == []
    return record, result


def assert_pslite_run(record: dict, kvstore: str = "dist_sync") -> None:
    assert record["status"] == "ok", record["reason"]
    world = record["world"]
    assert (world["nodes"], world["devices"], world["hosts"], world["device_type"]) == (
        2, 2, ["127.0.0.1", "127.0.0.2"], "cpu")
    execution = record["execution"]
    assert (execution["launcher"], execution["servers"], execution["workers"]) == ("pslite", 2, 2)
    assert execution["scheduler"] == "local" and execution["ps_root"].startswith("127.0.0.1:")
    reported = record["config"]["reported_by_case"]
    assert (reported["kvstore"], reported["servers"], reported["workers"]) == (kvstore, 2, 2)
    assert reported["lr"] == pytest.approx(0.2)
    cfg = record["config"]
    assert (cfg["batch_per_device"], cfg["global_batch"], cfg["image_size"], cfg["dtype"]) == (4, 8, 32, "float32")
    tp = record["metrics"]["throughput"]
    assert len(tp["samples"]) == 2 and all(s > 0 for s in tp["samples"])  # (5 - 1 warmup) // 2
    assert tp["per_device"] == pytest.approx(tp["mean"] / 2)
    assert record["metrics"]["timed_images"] == 2 * 2 * 2 * 4  # intervals x batches x workers x batch
    [rep] = record["repetitions"]
    assert rep["exit_codes"] == {"worker-0": 0, "worker-1": 0, "server-0": 0, "server-1": 0, "scheduler": 0}
    assert rep["warmup"]["images"] == 2 * 4
    logs = Path(rep["run_dir"]) / "logs"
    assert sorted(p.name for p in logs.iterdir()) == [  # and a telemetry sampler per host
        "scheduler.log", "server-0.log", "server-1.log", "telemetry-0.log", "telemetry-1.log", "worker-0.log",
        "worker-1.log"]
    assert record["provenance"]["versions"]["mxnet"] == "1.9.1"
    assert "DIST_KVSTORE" in record["provenance"]["versions"]["mxnet_features"]


def test_two_workers_train_from_recordio_over_ps_lite(suite_cli, synthetic_data, no_oversubscription):
    record, result = run_record(suite_cli, *LOOPBACK, "--data-dir", str(synthetic_data), case_args=TINY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert_pslite_run(record)
    # the interconnect check before it (two nodes): each worker's push and pull through the same two servers
    check = record["metrics"]["interconnect"]
    assert check["status"] == "ok", check["reason"]
    assert (check["exchange"], check["ranks"], check["nodes"]) == ("parameter-server", 2, 2)
    assert check["implementation"] == "mxnet 1.9.1 kvstore dist_sync push and pull (2 ps-lite server(s))"
    assert [s["bytes"] for s in check["sizes"]] == message_sizes(25_557_032 * 4)  # case.toml's [scaling]
    assert all(s["busbw_gb_s"] == pytest.approx(2 * s["algbw_gb_s"], rel=1e-3) for s in check["sizes"])
    assert check["network"]["bandwidth_gbit_s"] > 0
    precheck = Path(check["run_dir"])
    assert sorted(p.name for p in (precheck / "allreduce").iterdir()) == ["rank-00000.json", "rank-00001.json"]
    assert {p.name for p in (precheck / "logs").iterdir()} >= {"scheduler.log", "server-0.log", "server-1.log"}
    cfg = record["config"]
    assert cfg["data"] == "synthetic-imagenet-jpeg-rec"
    reported = cfg["reported_by_case"]
    manifest = json.loads((synthetic_data / "imagenet-rec" / "manifest.json").read_text())
    assert reported["data_manifest"]["splits"]["train"]["idx_sha256"] == manifest["splits"]["train"]["idx_sha256"]
    assert reported["train_images"] == CLASSES * TRAIN_PER_CLASS and reported["num_classes"] == CLASSES
    assert reported["parameters"] == resnet50_v1_params(CLASSES)
    # 24 images / (4 per worker x 2 workers) = 3 batches an epoch; 5 batches = 1.667 epochs.
    [results] = record["metrics"]["results"]
    assert (reported["epoch_batches"], results["batches"], results["epochs"]) == (3, 5, pytest.approx(1.667))
    assert results["worker_0_samples_per_sec"] > 0
    assert "samples/sec" in result.stdout and "iteration 2/2" in result.stdout


def test_benchmark_mode_needs_no_data(suite_cli, mxnet_stack, tmp_path, no_oversubscription):
    record, result = run_record(suite_cli, *LOOPBACK, "--no-precheck", "--data-dir", str(tmp_path / "empty"),
                                case_args=(*TINY, "--benchmark"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert_pslite_run(record)
    assert record["config"]["data"] == "synthetic"
    assert record["config"]["reported_by_case"]["parameters"] == resnet50_v1_params(1000)
    # MXNet counts no FLOPs: the same architecture's count, and each worker's measured matmul peak
    used = record["metrics"]["utilisation"]
    assert used["flops_per_sample"] == pytest.approx(22_911_811_584 * (32 / 224) ** 2)
    assert used["flops_source"].startswith("architecture count: resnet50-v1 at 224 px")
    assert used["measured_peak"]["ranks"] == 2 and used["precision"] == "fp32" and 0 < used["mfu_measured"] <= 1


def test_one_node_splits_its_batch_over_its_devices(suite_cli, mxnet_stack, tmp_path, no_oversubscription):
    record, result = run_record(suite_cli, "--gpus-per-node", "2", "--data-dir", str(tmp_path),
                                case_args=(*TINY, "--benchmark"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    reported = record["config"]["reported_by_case"]
    assert (reported["kvstore"], reported["workers"], reported["servers"]) == ("local", 1, 0)
    assert reported["devices"] == ["cpu(0)", "cpu(1)"]
    assert (record["config"]["batch_per_device"], record["config"]["global_batch"]) == (2, 4)
    assert record["repetitions"][0]["exit_codes"] == {"worker-0": 0}


def test_a_failing_worker_ends_the_whole_job(suite_cli, synthetic_data, no_oversubscription):
    record, result = run_record(suite_cli, *LOOPBACK, "--no-precheck", "--data-dir", str(synthetic_data),
                                case_args=(*TINY, "--dtype", "float16"))
    assert result.returncode == 1
    assert record["status"] == "failed"
    assert record["reason"].startswith("repetition 0: worker-") and "--dtype float16 needs GPUs" in record["reason"]
    codes = record["repetitions"][0]["exit_codes"]
    assert sorted(codes) == ["scheduler", "server-0", "server-1", "worker-0", "worker-1"]
    assert all(code != 0 for code in codes.values())


def test_installed_mxnet_stack_matches_its_lock(mxnet_stack):
    from test_stacks import lock_pins

    installed = {name.replace("_", "-"): version for name, version in mxnet_stack.info["packages"].items()}
    for name, version in lock_pins(mxnet_stack.stack.lock).items():
        assert installed.get(name) == version, name
    assert installed["mxnet"] == "1.9.1"
    assert tuple(int(part) for part in installed["numpy"].split(".")[:2]) < (1, 24)  # mxnet 1.9.1 breaks on newer
