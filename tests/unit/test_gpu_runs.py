"""A GPU figure only from GPUs: a run asked on GPUs whose ranks train on the CPU fails, the sampler
reads the run's GPUs only and the diagnosis the ones the ranks named, `make gpu-check` fails on a CPU
side, idle GPUs and two hosts, and a published figure says what it is. Stand-ins: a fake nvidia-smi
and a fake NVML (no GPU here); the probe, the record and the checks are the real ones."""

import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT
from support.gpus import fake_nvidia_smi

from suite.analysis import diagnosis, references
from suite.inputs.hostfiles import Host, World
from suite.instack import probe as probe_module
from suite.instack.probe import Probe
from suite.instack.telemetry_sampler import Gpus, run_gpus
from suite.records.measure import Repetition, measure
from suite.records.telemetry_window import mark_used
from suite.records.write import RunContext, build_record, trained_elsewhere, utc_now

UUIDS = [f"GPU-{i}0000000-0000-0000-0000-000000000000" for i in range(4)]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    folder = fake_nvidia_smi(tmp_path / "fake", 2)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


# --- the device a rank trained on against the one asked for ----------------------------------------

def rank_files(run_dir: Path, device_type: str, ranks: int = 2) -> None:
    for rank in range(ranks):
        probe = Probe(rank, ranks, local_rank=rank, local_size=ranks, run_dir=str(run_dir))
        probe.start(config={"dtype": "float32", "device_type": device_type,
                            "device_name": "cpu" if device_type == "cpu" else "NVIDIA H100 80GB HBM3"},
                    versions={"torch": "2.13.0"})
        probe._write("iteration", index=0, images=40, seconds=1.0)
        probe.end()


def context(world: World, device_asked: str | None = None) -> RunContext:
    from suite.inputs.cases import load_case

    case = load_case("pytorch-ddp")
    return RunContext("run-1", case, case.parse_options([]), world, "local", "local", ["suite"], utc_now(),
                      device_asked=device_asked)


def test_a_run_asked_on_gpus_whose_ranks_trained_on_the_cpu_fails_saying_so(tmp_path, monkeypatch):
    monkeypatch.delenv("SUITE_DEVICE", raising=False)
    rank_files(tmp_path, "cpu")
    rep = Repetition(0, str(tmp_path))
    measure(rep, 2)
    world = World((Host("gpu01", 2),), "hf")
    record = build_record(context(world, "cuda"), [rep], {}, {}, None)
    assert record["status"] == "failed"
    assert record["reason"] == ("asked to train on cuda (GPUs are present and were asked for) but rank 0 on "
                                f"{os.uname().nodename} trained on cpu")
    assert build_record(context(world), [rep], {}, {}, None)["status"] == "ok"  # CPUs asked: a CPU run is fine
    assert trained_elsewhere("cuda", [{"rank": 0, "config": {"device_type": "cuda"}}]) is None


def test_a_rank_that_finds_no_gpu_where_one_was_asked_stops_before_training(tmp_path, monkeypatch, two_gpus):
    monkeypatch.setenv("SUITE_DEVICE", "cuda")
    probe = Probe(0, 1, run_dir=str(tmp_path))
    with pytest.raises(SystemExit, match=r"asked to train on cuda .* but this rank found cpu"):
        probe.start(config={"device_type": "cpu", "device_name": "cpu"}, versions={})
    started = json.loads((tmp_path / "ranks" / "rank-00000.jsonl").read_text().splitlines()[0])
    assert started["config"]["device_type"] == "cpu" and started["gpus"] == []  # said before it stopped
    Probe(1, 2, 1, 2, run_dir=str(tmp_path)).start(config={"device_type": "cuda"}, versions={})
    started = json.loads((tmp_path / "ranks" / "rank-00001.jsonl").read_text().splitlines()[0])
    assert started["gpus"] == [{"device_index": 1, "visible_as": "1", "index": "1", "uuid": UUIDS[1],
                                "bus_id": "00000000:19:00.0", "name": "NVIDIA H100 80GB HBM3"}]
    assert "mlperf_logging" in started["versions"]


def test_a_ranks_gpu_is_found_through_cuda_visible_devices(monkeypatch, two_gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert probe_module.visible_gpu(0)["uuid"] == UUIDS[1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1000,GPU-0000")  # leading parts of UUIDs, as CUDA takes them
    assert [probe_module.visible_gpu(i)["index"] for i in (0, 1)] == ["1", "0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert probe_module.visible_gpu(0) == {"device_index": 0, "visible_as": "7"}  # not listed: said as seen


# --- the sampler reads the run's GPUs, the diagnosis the ranks' ---------------------------------------

class Nvml:
    """pynvml's calls for 4 GPUs with UUIDs and bus ids (the sampler's other calls are not needed here)."""

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 4

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return UUIDS[h].encode()  # bytes, as older pynvml releases give

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0")

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30, used=0)


def test_the_sampler_reads_only_the_gpus_of_cuda_visible_devices():
    everything = [(i, UUIDS[i]) for i in range(4)]
    assert run_gpus(everything, None) == everything
    assert run_gpus(everything, "2,0") == [everything[2], everything[0]]
    assert run_gpus(everything, "GPU-3000") == [everything[3]]
    assert run_gpus(everything, "") == [] and run_gpus(everything, "1,-1,2") == [everything[1]]
    described = Gpus(Nvml(), visible="3,1").describe()
    assert [(g["index"], g["nvml_index"], g["uuid"], g["bus_id"]) for g in described] == [
        (0, 3, UUIDS[3], "00000000:1B:00.0"), (1, 1, UUIDS[1], "00000000:19:00.0")]
    assert Gpus(Nvml(), visible="").why == "not available: NVML lists no GPU of CUDA_VISIBLE_DEVICES="
    assert len(Gpus(Nvml()).describe()) == 4


def telemetry_hosts(utils: dict[str, float]) -> dict:
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": uuid, "util_pct": {"mean": util, "max": util}}
            for i, (uuid, util) in enumerate(utils.items())]
    return {"gpu01": {"gpus": gpus}}


def gpu_record(utils: dict[str, float], devices: int = 1) -> dict:
    return {"world": {"slots": {"gpu01": devices}, "devices": devices, "device_type": "cuda"},
            "metrics": {"telemetry": {"hosts": telemetry_hosts(utils)}}}


def test_the_diagnosis_reads_the_gpus_the_ranks_trained_on_not_the_busiest():
    record = gpu_record({UUIDS[0]: 0.0, UUIDS[1]: 97.0})  # another job keeps GPU 1 busy
    assert diagnosis.gpu_busy(record) is None  # without the ranks' UUIDs (older records): not the busiest
    assert diagnosis.unmatched_gpus(record).startswith("GPUs unmatched on gpu01: the record does not say")
    mark_used(record["metrics"]["telemetry"]["hosts"], [{"host": "gpu01", "gpus": [{"uuid": UUIDS[0]}]}])
    assert diagnosis.unmatched_gpus(record) is None
    assert [g["uuid"] for g in diagnosis.run_gpus(record)] == [UUIDS[0]] and diagnosis.gpu_busy(record) == 0.0


def test_without_uuids_the_ranks_gpus_are_matched_by_bus_id_on_their_own_host():
    """NVML gave no UUIDs: the bus ids the ranks named (nvidia-smi's form) pick the GPUs sampled on
    their host (NVML's form), not the same bus on another host."""
    hosts = {name: {"gpus": [{"index": i, "uuid": None, "bus_id": f"0000:{0x18 + i:02X}:00.0"} for i in range(2)]}
             for name in ("gpu01", "gpu02")}
    mark_used(hosts, [{"host": "gpu01.cluster", "gpus": [{"device_index": 0, "bus_id": "00000000:19:00.0"}]}])
    assert [g["used"] for g in hosts["gpu01"]["gpus"]] == [False, True]
    assert [g["used"] for g in hosts["gpu02"]["gpus"]] == [False, False]
    loopback = {"127.0.0.2": {"gpus": [{"uuid": None, "bus_id": "00000000:18:00.0"}]}, "127.0.0.3": {"gpus": []}}
    mark_used(loopback, [{"host": "127.0.0.3", "gpus": [{"bus_id": "00000000:18:00.0"}]}])
    assert loopback["127.0.0.2"]["gpus"][0]["used"] is False  # addresses are matched whole
    untouched = telemetry_hosts({UUIDS[0]: 50.0})
    mark_used(untouched, [{"host": "gpu01", "gpus": [{"device_index": 0, "visible_as": "0"}]}])  # nothing named
    assert "used" not in untouched["gpu01"]["gpus"][0]
    assert untouched["gpu01"]["gpus_unmatched"].startswith("the ranks named no UUID or PCI bus id of their GPUs")


def test_gpus_the_ranks_do_not_name_are_unmatched_never_the_busiest_in_gpu_check_and_the_diagnosis():
    record = gpu_record({UUIDS[0]: 0.0, UUIDS[1]: 97.0})  # another job keeps GPU 1 busy; the run's is idle
    mark_used(record["metrics"]["telemetry"]["hosts"], [{"host": "gpu01", "gpus": [{"device_index": 0}]}])
    assert diagnosis.run_gpus(record) == [] and diagnosis.gpu_busy(record) is None
    assert gpu_check().telemetry_problem(record).startswith("GPUs unmatched on gpu01: the ranks named no UUID")
    record.update(config={"global_batch": 8}, repetitions=[])
    record["metrics"]["timed_seconds"] = 10.0
    found = diagnosis.diagnose(record)
    assert found["figures"]["device_busy"] is None and "GPUs unmatched on gpu01" in found["why"], found


# --- make gpu-check ----------------------------------------------------------------------------------

def checked_record(tmp_path: Path, device_type="cuda", host="gpu01", utils=None, mllog=None, versions=None) -> dict:
    ranks = tmp_path / "rep-0" / "ranks"
    ranks.mkdir(parents=True, exist_ok=True)
    if mllog:
        (ranks / "rank-00000.mllog").write_text(mllog)
    record = gpu_record(utils if utils is not None else {UUIDS[0]: 90.0})
    mark_used(record["metrics"]["telemetry"]["hosts"], [{"host": host, "gpus": [{"uuid": UUIDS[0]}]}])
    record["world"]["device_type"] = device_type
    record["config"] = {"reported_by_case": {"device_name": "cpu" if device_type == "cpu" else "NVIDIA H100 80GB HBM3"}}
    record["provenance"] = {"host_info": {host: {}}, "versions": versions or {}}
    record["repetitions"] = [{"run_dir": str(tmp_path / "rep-0")}]
    return record


def bare(device_type="cuda", host="gpu01") -> dict:
    return {"device_type": device_type, "device_name": "cpu" if device_type == "cpu" else "NVIDIA H100 80GB HBM3",
            "device": "cpu" if device_type == "cpu" else "cuda:0", "host": host, "throughput": 4500.0}


def test_gpu_check_fails_a_side_on_the_cpu_idle_gpus_and_two_hosts(tmp_path):
    check = gpu_check()
    good = checked_record(tmp_path)
    assert check.device_problem(good, bare()) is None and check.host_problem(good, bare()) is None
    assert check.telemetry_problem(good) is None
    assert check.device_problem(checked_record(tmp_path, "cpu"), bare()) == "the suite's run trained on cpu, not a GPU"
    assert check.device_problem(good, bare("cpu")).startswith("the bare loop trained on cpu, not a GPU")
    assert check.host_problem(good, bare(host="login1")) == (
        "the suite's run trained on gpu01, the bare loop on login1: run gpu-check on the host the run uses")
    idle = checked_record(tmp_path, utils={UUIDS[0]: 0.0})
    assert check.telemetry_problem(idle) == (f"the run's GPU(s) {UUIDS[0]} were idle over the timed window "
                                             "(utilisation 0%)")


def test_gpu_check_says_mllog_lines_are_missing_for_want_of_mlperf_logging_and_does_not_fail(tmp_path):
    check = gpu_check()
    assert check.mllog_line(checked_record(tmp_path, mllog=":::MLLOG {}\n")) == ("ok", True)
    said, holds = check.mllog_line(checked_record(tmp_path / "b", versions={"mlperf_logging": None}))
    assert holds and said.startswith("not written: the stack has no mlperf_logging")
    said, holds = check.mllog_line(checked_record(tmp_path / "c", versions={"mlperf_logging": "4.1.68"}))
    assert not holds and said.startswith("FAILED: no :::MLLOG lines")


# --- references say what they are --------------------------------------------------------------------

def published(device_name: str, dtype: str, devices: int, per_device: float, batch: int = 256,
              framework: str = "torch", case: str = "pytorch-ddp") -> dict | None:
    return references.comparison({
        "case": case, "world": {"devices": devices}, "provenance": {"versions": {framework: "1"}},
        "config": {"dtype": dtype, "batch_per_device": batch, "reported_by_case": {"device_name": device_name}},
        "metrics": {"throughput": {"per_device": per_device}}})


def test_the_mlperf_v4_figures_are_matched_and_say_what_they_are():
    h100 = published("NVIDIA H100 80GB HBM3", "amp-float16", 1, 4366.0)
    assert h100["source"].startswith("MLPerf Training v4.0, NVIDIA DGX H100")
    assert h100["published_per_device"] == pytest.approx(57300 / 8) and h100["ratio"] == pytest.approx(0.61, abs=0.005)
    assert (h100["framework"], h100["batch_per_device"], h100["devices"]) == ("MXNet", 400, 8)
    assert h100["same_framework"] is False and h100["same_batch"] is False and not h100["same_devices"]
    line = references.summary_line(h100)
    assert line.startswith("published: 7,162 img/s per GPU of an 8-GPU MXNet + DALI run at batch 400 (MLPerf Training "
                           "v4.0, NVIDIA DGX H100, ResNet-50 v1.5 (MXNet + DALI)")
    assert line.endswith("this run 0.61x that")
    h200 = published("NVIDIA H200", "amp-float16", 8, 7000.0)
    assert h200["published_per_device"] == pytest.approx(63600 / 8) and h200["same_devices"]
    assert published("NVIDIA GH200 480GB", "amp-float16", 1, 4000.0) is None  # H200 is a word of the name, not GH200
    mxnet = published("NVIDIA H100 80GB HBM3", "amp-float16", 8, 7000.0, batch=400, framework="mxnet",
                      case="mxnet-imagenet")
    assert mxnet["same_framework"] and mxnet["same_batch"] and mxnet["ratio"] == pytest.approx(7000 / 7162.5, abs=1e-3)


def test_a_same_framework_figure_ranks_first_and_the_line_names_its_data_path():
    a100 = published("NVIDIA A100-SXM4-80GB", "amp-float16", 1, 2470 * 0.9)
    assert a100["framework"] == "PyTorch" and a100["same_framework"] and a100["same_batch"]
    line = references.summary_line(a100)
    assert line.startswith("published: 2,470 img/s per GPU of a 1-GPU PyTorch run at batch 256 on ImageNet, DLE's data "
                           "loader (NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX A100, mixed precision")
    assert line.endswith("this run 0.90x that")
    old = {"source": "S", "published_per_device": 7000.0, "ratio": 0.62, "same_devices": False}  # an older record's
    assert references.summary_line(old) == ("published: 7,000 img/s per GPU, S (its 1-device figure): "
                                            "this run 0.62x that")
