"""What the hardware did during a run: the telemetry sampler (one per host, ended with the job), its
figures over the timed window, the NVML and RAPL paths against fakes, MLPerf-style log lines parsed
back with mlperf-logging, and the interconnect check before a 2-node run that `predict` then uses."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, installed_stack, listed_gpus, records_in, tiny
from support.cluster_fixtures import alive

from suite.execution import interconnect_check
from suite.execution.plan import Plan, Process
from suite.inputs.hostfiles import Host, World
from suite.instack import telemetry_sampler
from suite.instack.probe import network_links
from suite.records.schema import validate
from suite.records.system_description import networking
from suite.records.telemetry_window import Cut, host_summary, summarize
from suite.schedulers.local import HERE, run_plan

TORCH = ("--case", "pytorch-synthetic")
INTERVAL = ("--telemetry-interval", "0.25")


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start_run(tmp_path: Path, *args: str, case_args=(), env: dict | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "suite", "run", "--results-dir", str(tmp_path / "results"),
               "--runs-dir", str(tmp_path / "runs"), *args, "--", *case_args]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def sampler_pids(tmp_path: Path) -> list[int]:
    """Pids the samplers wrote in their start lines."""
    pids = []
    for path in tmp_path.glob("runs/*/rep-*/telemetry/*.jsonl"):
        lines = path.read_text().splitlines()
        if lines and lines[0].endswith("}"):
            pids.append(json.loads(lines[0])["pid"])
    return pids


# --- the scheduler ends helpers with the job ------------------------------------------------------

def test_a_plan_ends_with_its_own_processes_and_then_ends_its_daemons(tmp_path):
    job = Process("job", "localhost", [sys.executable, "-c", "import time; time.sleep(0.5)"], {}, str(tmp_path))
    sleeper = "import os, time; print(os.getpid(), flush=True); time.sleep(300)"
    helper = Process("helper", "localhost", [sys.executable, "-c", sleeper], {}, str(tmp_path), daemon=True)
    broken = Process("broken", "localhost", [sys.executable, "-c", "raise SystemExit(3)"], {}, str(tmp_path),
                     daemon=True)
    started = time.monotonic()
    results = run_plan(Plan((job, helper, broken), ranks=0), tmp_path / "logs", 60, None, HERE)
    assert time.monotonic() - started < 30  # 0.5 s of job, then the daemons' grace, on a machine maybe busy
    assert [(r.name, r.ok) for r in results] == [("job", True)]  # a helper's exit never fails the plan
    helper_pid = int((tmp_path / "logs" / "helper.log").read_text().split()[0])
    assert not alive(helper_pid)


# --- figures over the timed window ----------------------------------------------------------------

def fake_samples(t0: float, count: int, gpus=None, rapl=None) -> list[dict]:
    samples = []
    for i in range(count):
        s = {"time": t0 + i, "cpu": [50.0, 100.0], "mem_used": 2 * 2**30, "rss": 2**30, "processes": 2}
        if gpus:
            s["gpus"] = gpus(i)
        if rapl:
            s["rapl_j"] = rapl(i)
        samples.append(s)
    return samples


def test_means_and_energy_are_read_over_the_window_only():
    samples = fake_samples(100.0, 11)
    for s in samples[:3]:
        s["cpu"] = [0.0, 0.0]  # warmup, before the window
    cut = Cut(samples, 103.0, 108.0)
    assert cut.covered and cut.seconds == 5
    summary = host_summary([cut], {"interval": 1.0, "memory_total": 8 * 2**30, "gpus": "not available: x",
                                   "rapl": "not available: y"}, images=100)
    assert summary["cpu_util_pct"] == {"mean": 75.0, "max": 75.0} and summary["samples"] == 6  # t = 103 ... 108
    assert summary["cpu_util_per_core_pct"] == [50.0, 100.0]
    assert summary["memory_used_gib"] == {"mean": 2.0, "max": 2.0} and summary["run_rss_gib"]["mean"] == 1.0
    assert summary["energy_j"] is None and summary["joules_per_image"] is None
    assert summary["gpus"] == "not available: x" and summary["series"]["window_s"] == [0.0, 5.0]
    assert not Cut(samples, 95.0, 108.0).covered  # no sample before the window: no figures made up


class FakeNvml:
    """pynvml's calls as the sampler uses them, for 2 GPUs: the first with an energy counter, the
    second without one (power only) and without NVLink."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1, 0, 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.tick, self.throughput_asked, self.fields_asked = 0, [], []

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return f"Fake GPU {h}"

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=90 - 10 * h, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=4 * 2**30, total=16 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        return 200_000 + 100_000 * h  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h == 1:
            raise self.NVMLError("Not Supported")
        self.tick += 1
        return 1_000_000 + 250_000 * self.tick  # mJ: 250 J per sample, a sample a second

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 + h

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 1410

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self.throughput_asked.append(h)
        return 1000 * (counter + 1)

    # counters' growth a second (a sample): NVLink TX and RX in KiB, PCIe TX and RX in bytes
    PER_SECOND = {138: 1024, 139: 2048, 197: 4 * 2**20, 198: 8 * 2**20}

    def nvmlDeviceGetFieldValues(self, h, fields):
        self.fields_asked.append((h, tuple(fields)))
        if h == 1:
            raise self.NVMLError("Not Supported")
        return [SimpleNamespace(nvmlReturn=0, valueType=3, value=SimpleNamespace(ullVal=self.PER_SECOND[f] * self.tick))
                for f in fields]


def test_nvml_figures_against_a_fake_nvml(tmp_path):
    gpus = telemetry_sampler.Gpus(FakeNvml())
    assert [g["name"] for g in gpus.describe()] == ["Fake GPU 0", "Fake GPU 1"]
    samples = [gpus.sample() for _ in range(11)]
    assert samples[0][1]["energy_j"] is None and (0, "energy") not in gpus.missing
    cut = Cut(fake_samples(0.0, 11, gpus=lambda i: samples[i]), 2.0, 7.0)
    start = {"interval": 1.0, "memory_total": 2**34, "gpus": gpus.describe(), "rapl": "not available: fake"}
    summary = host_summary([cut], start, images=500)
    first, second = summary["gpus"]
    assert first["util_pct"] == {"mean": 90.0, "max": 90.0} and second["util_pct"]["mean"] == 80.0
    assert first["memory_used_gib"]["mean"] == 4.0 and first["temperature_c"]["max"] == 60
    assert first["power_w"] == 200.0 and first["sm_clock_mhz"] == 1410
    assert first["pcie_tx_kb_s"] == pytest.approx(4096) and first["pcie_rx_kb_s"] == pytest.approx(8192)  # counters
    assert second["pcie_rx_kb_s"] == 2000  # no counters: the driver's throughput query
    assert first["energy_j"] == pytest.approx(5 * 250)  # from the counter: 250 J a second over 5 s
    assert second["energy_j"] == pytest.approx(5 * 300)  # no counter: 300 W integrated over 5 s
    assert first["nvlink_tx_kib_s"] == pytest.approx(1024) and second["nvlink_tx_kib_s"] is None
    assert summary["energy_j"] == pytest.approx(2750) and summary["energy_sources"] == ["gpu"]
    assert summary["joules_per_image"] == pytest.approx(5.5) and summary["power_w_mean"] == pytest.approx(550)


def test_pcie_is_read_from_counters_where_the_driver_has_them_and_a_refused_field_is_not_asked_again():
    nvml = FakeNvml()
    gpus = telemetry_sampler.Gpus(nvml)
    for _ in range(3):
        gpus.sample()
    assert set(nvml.throughput_asked) == {1}  # the 20-ms query only where no counter answers
    assert [h for h, _ in nvml.fields_asked].count(1) == 2  # PCIe's and NVLink's fields asked once each
    refusing = FakeNvml()
    refusing.nvmlDeviceGetFieldValues = lambda h, fields: [SimpleNamespace(nvmlReturn=3, value=None) for _ in fields]
    gpus = telemetry_sampler.Gpus(refusing)
    assert "pcie_tx_kbs" in gpus.sample()[0] and (0, "pcie") in gpus.missing and (0, "nvlink") in gpus.missing
    narrow = FakeNvml()  # 32-bit byte counters would wrap between samples: the throughput query instead
    narrow.nvmlDeviceGetFieldValues = lambda h, fields: [
        SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=7, ullVal=7)) for _ in fields]
    found = telemetry_sampler.Gpus(narrow).sample()[0]
    assert found["pcie_tx_kbs"] == 1000 and "pcie_tx_bytes" not in found and found["nvlink_tx_kib"] == 7


def test_a_sample_says_what_it_took_and_the_summary_reads_that_over_the_window():
    import psutil

    found = telemetry_sampler.sample(psutil, telemetry_sampler.RunProcesses(None), telemetry_sampler.Gpus(FakeNvml()),
                                     SimpleNamespace(zones={}))
    assert 0 < found["took_s"] < 60 and len(found["gpus"]) == 2
    samples = fake_samples(0.0, 11)
    for i, s in enumerate(samples):
        s["took_s"] = 0.040 if i == 4 else 0.002  # one slow sample inside the window, none outside counted
    samples[0]["took_s"] = 1.0
    summary = host_summary([Cut(samples, 2.0, 7.0)], {"interval": 1.0, "memory_total": 2**33, "gpus": "not available",
                                                     "rapl": "not available"}, images=10)
    assert summary["sample_ms"] == {"mean": pytest.approx((40 + 5 * 2) / 6, abs=0.01), "max": pytest.approx(40.0)}


def test_nvml_missing_says_why():
    assert telemetry_sampler.Gpus(SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(OSError("no driver")))).why \
        == "not available: OSError: no driver"


def test_rapl_counters_are_read_and_unwrapped(tmp_path):
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("1000000000\n")  # wraps at 1000 J
    (zone / "energy_uj").write_text("5\n")
    rapl = telemetry_sampler.Rapl(str(tmp_path / "intel-rapl:[0-9]*"))
    assert rapl.sample() == {"package-0@intel-rapl:0": 5e-6}
    readings = [900.0 + 40 * i for i in range(11)]  # 40 W, wrapping past 1000 J after 3 s
    samples = fake_samples(0.0, 11, rapl=lambda i: {"package-0@intel-rapl:0": readings[i] % 1000})
    summary = host_summary([Cut(samples, 1.0, 9.0)], {"interval": 1.0, "memory_total": 2**33, "gpus": "not available",
                                                     "rapl": rapl.describe()}, images=80)
    assert summary["cpu_package"]["energy_j"] == pytest.approx(320) and summary["energy_sources"] == ["cpu-package"]
    assert summary["joules_per_image"] == pytest.approx(4.0)
    assert summary["series"]["cpu_package_power_w"][1:] == [40.0] * 10


# --- the interconnect check's figures --------------------------------------------------------------

def test_bus_bandwidth_and_latency_as_nccl_tests_define_them(tmp_path):
    ranks, bandwidth, latency = 4, 10e9 / 8, 20e-6  # 10 Gbit/s, 20 us per hop
    sizes = interconnect_check.message_sizes(100 * 2**20)
    assert sizes == [2**20, 4 * 2**20, 16 * 2**20, 64 * 2**20, 100 * 2**20]
    for rank in range(ranks):
        timings = [{"bytes": s, "seconds": 2 * (ranks - 1) * latency + 2 * (ranks - 1) / ranks * s / bandwidth
                    * (1.1 if rank == 2 else 1.0)} for s in sizes]  # rank 2 is slower: its time counts
        (tmp_path / f"rank-{rank:05d}.json").write_text(json.dumps(
            {"rank": rank, "size": ranks, "implementation": "fake", "device": "cpu", "iters": 3, "timings": timings}))
    world = World((Host("a", 2), Host("b", 2)), "test")
    found = interconnect_check.summarize(tmp_path, world, ranks)
    last = found["sizes"][-1]
    assert last["busbw_gb_s"] == pytest.approx(last["algbw_gb_s"] * 1.5, rel=1e-3)
    assert last["algbw_gb_s"] == pytest.approx(100 * 2**20 / (last["latency_us"] * 1e-6) / 1e9, rel=1e-3)
    assert found["network"]["bandwidth_gbit_s"] == pytest.approx(10 / 1.1, rel=0.01)
    assert found["network"]["latency_us"] == pytest.approx(20, rel=0.05)


# --- real runs -------------------------------------------------------------------------------------

def test_a_run_records_telemetry_per_host_and_its_samplers_end_with_it(tmp_path, pytorch_stack):
    conf = tmp_path / "nccl.conf"  # NCCL's own settings file, which the ranks' host facts read back
    conf.write_text("# a site's NCCL settings\nNCCL_IB_HCA=mlx5_0:1\nNCCL_SOCKET_IFNAME=ib\n")
    runner = start_run(tmp_path, *TORCH, *INTERVAL, case_args=tiny("pytorch-synthetic"),
                       env={**os.environ, "NCCL_CONF_FILE": str(conf)})
    [pid] = wait_for(lambda: sampler_pids(tmp_path), 300, "the sampler's start line")
    assert alive(pid)  # positive control
    output, _ = runner.communicate(timeout=600)
    assert runner.returncode == 0, output[-3000:]
    assert not alive(pid)
    [record] = records_in(tmp_path / "results")
    validate(record)
    host = record["metrics"]["telemetry"]["hosts"]["localhost"]
    assert 0 <= host["cpu_util_pct"]["mean"] <= host["cpu_util_pct"]["max"] <= 100
    assert 0 < host["memory_used_gib"]["mean"] <= host["memory_used_gib"]["max"] <= host["memory_total_gib"]
    assert 0 < host["run_rss_gib"]["max"] < host["memory_total_gib"] and host["run_processes"] >= 2
    if listed_gpus():  # what this host has is what the record says
        assert len(host["gpus"]) == listed_gpus() and all(g["util_pct"] is not None for g in host["gpus"])
    else:
        assert host["gpus"].startswith("not available") and host["energy_j"] is None
    assert host["timed_seconds"] == pytest.approx(record["metrics"]["timed_seconds"], rel=0.2, abs=0.5)
    assert [p["name"] for p in record["repetitions"][0]["processes"]] == ["horovodrun"]
    assert "interconnect" not in record["metrics"]  # one node: no check unless asked for
    described = record["provenance"]["system_description"]  # MLPerf's system-description field names
    assert described["number_of_nodes"] == 1 and described["accelerators_per_node"] == listed_gpus()
    assert described["host_processor_vcpu_count"] >= 1 and "torch" in described["framework"]
    [(hostname, host_info)] = record["provenance"]["host_info"].items()  # this machine's, as rank 0 read them
    assert host_info["network"] == network_links()
    assert host_info["nccl_conf"][str(conf)] == {"NCCL_IB_HCA": "mlx5_0:1", "NCCL_SOCKET_IFNAME": "ib"}
    assert f"   NCCL's files: {conf} sets NCCL_IB_HCA=mlx5_0:1, NCCL_SOCKET_IFNAME=ib (on {hostname})" in output
    assert ("host_network_card_count" in described) == bool(networking(network_links()))
    check_mllog_lines(Path(record["repetitions"][0]["run_dir"]) / "ranks" / "rank-00000.mllog", record)
    check_report_draws_telemetry(tmp_path, record)


def check_mllog_lines(path: Path, record: dict) -> None:
    """The rank's :::MLLOG lines, parsed back with mlperf-logging's own parser."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    lines, errors = parse_file(str(path), ruleset="6.1.0")
    assert errors == []
    keys = [line.key for line in lines]
    assert keys[:2] == ["global_batch_size", "run_start"] and keys[-2:] == ["train_samples", "run_stop"]
    assert keys.count("block_start") == keys.count("block_stop") == keys.count("tracked_stats") == 3
    assert lines[0].value["value"] == record["config"]["global_batch"]
    stats = [line.value["value"]["throughput"] for line in lines if line.key == "tracked_stats"]
    assert stats == pytest.approx(record["metrics"]["throughput"]["samples"])  # one rank: the same figures


def check_report_draws_telemetry(tmp_path: Path, record: dict) -> None:
    from suite.analysis.report import write_report

    write_report(tmp_path / "results", tmp_path / "report", warn=lambda m: None)
    page = (tmp_path / "report" / "case-pytorch-synthetic.html").read_text()
    assert "utilisation and power over time" in page and "localhost: CPU %" in page
    energy = record["metrics"]["telemetry"]["joules_per_image"]  # the index's column where a row has a figure
    assert ("<th>J/img</th>" in (tmp_path / "report" / "index.html").read_text()) == (energy is not None)
    assert "joules_per_image" in (tmp_path / "report" / "summary.csv").read_text().splitlines()[0]


def test_samplers_end_when_the_run_is_stopped(tmp_path, pytorch_stack):
    runner = start_run(tmp_path, *TORCH, *INTERVAL, case_args=tiny("pytorch-synthetic", num_iters=500))
    pids = wait_for(lambda: sampler_pids(tmp_path), 300, "the sampler's start line")
    wait_for(lambda: any('"iteration"' in p.read_text() for p in tmp_path.glob("runs/*/rep-0/ranks/*.jsonl")),
             300, "a timed iteration")
    assert all(alive(pid) for pid in pids)  # positive control
    runner.send_signal(signal.SIGTERM)
    output, _ = runner.communicate(timeout=90)
    assert runner.returncode == 1, output[-3000:]
    time.sleep(1)
    assert not any(alive(pid) for pid in pids)
    [record] = records_in(tmp_path / "results")
    validate(record)
    assert record["status"] == "failed"


@pytest.fixture(scope="module")
def ddp_stack():

    return installed_stack("pytorch")


def test_two_node_loopback_run_checks_the_interconnect_and_predict_uses_it(suite_cli, ddp_stack):
    result = suite_cli("run", "--case", "pytorch-ddp", "--nodes", "2", "--hostfile", "hostfiles/loopback", *INTERVAL,
                       case_args=tiny("pytorch-ddp"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    validate(record)
    check = record["metrics"]["interconnect"]
    assert check["status"] == "ok" and (check["ranks"], check["nodes"]) == (2, 2)
    assert check["implementation"] == "torch.distributed gloo"
    assert [s["bytes"] for s in check["sizes"]] == interconnect_check.message_sizes(25_557_032 * 4)
    assert all(s["busbw_gb_s"] > 0 and s["latency_us"] > 0 for s in check["sizes"])
    assert check["seconds"] > 0 and check["network"]["bandwidth_gbit_s"] > 0
    said = next(line.strip() for line in result.stdout.splitlines() if "interconnect:" in line)
    links = record["provenance"]["system_description"].get("host_network_card_count")
    assert said.startswith("interconnect: torch.distributed gloo (ring) over 2 node(s), 2 participants: bus "
                           f"bandwidth {check['sizes'][-1]['busbw_gb_s']:.3g} GB/s at 102.2 MB; "), said
    assert said.endswith(f"us per hop; each node's links: {links}" if links else " us per hop"), said
    assert set(record["metrics"]["telemetry"]["hosts"]) == {"127.0.0.1", "127.0.0.2"}
    assert record["metrics"]["timed_seconds"] < sum(r["timed_seconds"] for r in record["repetitions"]) + 1
    predicted = suite_cli("predict", "--case", "pytorch-ddp", "--devices", "2,4", "--cluster", "loopback",
                          "--results-dir", str(suite_cli.results))
    assert predicted.returncode == 0, predicted.stderr
    assert f"network: measured by the interconnect check of run {record['run_id']}" in predicted.stdout
    skipped = suite_cli("run", "--case", "pytorch-ddp", "--nodes", "2", "--hostfile", "hostfiles/loopback",
                        "--no-precheck", "--telemetry-interval", "0", case_args=tiny("pytorch-ddp"))
    assert skipped.returncode == 0, skipped.stdout[-3000:]
    second = next(r for r in records_in(suite_cli.results) if r["run_id"] != record["run_id"])
    assert "interconnect" not in second["metrics"] and "telemetry" not in second["metrics"]


def test_summary_of_a_run_without_samples_says_so(tmp_path):
    rep = SimpleNamespace(status="ok", run_dir=str(tmp_path), images=10, starts=[])
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank-00000.jsonl").write_text(
        json.dumps({"event": "iteration", "time": 10.0, "seconds": 1.0, "images": 10, "index": 0}) + "\n")
    found = summarize([rep], World((Host("localhost", 1),), "test"), 1.0)
    assert found["hosts"]["localhost"].startswith("not available") and found["joules_per_image"] is None
