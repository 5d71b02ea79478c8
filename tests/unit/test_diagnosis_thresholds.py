"""The diagnosis's thresholds against the runs measured on one H100 (../shared/NOTES.md): records
built from those figures come out as measured. AMP + channels-last at batch 256: 4,340-4,376 img/s,
92% busy: compute-bound. fp32 at batch 32: 1,000-1,100 img/s, 62-71% busy: host-bound. 160 px at
batch 64 with AMP: 1,750 img/s, 30% busy with about 30 ms of CPU per step: host-bound (CUDA graphs
took that step from 2,621 to 6,571 img/s)."""

import pytest

from suite.analysis import diagnosis


def h100_record(img_s: float, batch: int, util_pct: float | None, cpu_ms_per_step: float,
                gpu_pass_s: float | None = None, devices: int = 1) -> dict:
    """A record of `devices` H100s at `img_s` in all: NVML's utilisation over the window, the ranks'
    CPU per step, and where given the GPU's own time for a step's pass (as the PyTorch cases time it)."""
    steps = 100
    step_s = batch * devices / img_s
    gpus = [{"index": i, "uuid": f"GPU-{i}", "used": True, "util_pct": {"mean": util_pct, "max": util_pct}}
            for i in range(devices)] if util_pct is not None else "not available: no NVML"
    return {
        "world": {"device_type": "cuda", "devices": devices, "slots": {"gpu01": devices},
                  "binding": {"policy": "none", "ranks": [{"rank": r, "host": "gpu01", "cpus": "0-15"}
                                                          for r in range(devices)]}},
        "config": {"global_batch": batch * devices, "parameters": 25557032},
        "metrics": {"timed_images": steps * batch * devices, "timed_seconds": steps * step_s,
                    "telemetry": {"hosts": {"gpu01": {"gpus": gpus}}}},
        "repetitions": [{"status": "ok", "results": {"gpu_pass_s": gpu_pass_s} if gpu_pass_s else {},
                         "profile": {"data_wait_share": None, "thread_busy": 0.99,
                                     "cores_per_rank": cpu_ms_per_step / 1000 / step_s}}],
    }


@pytest.mark.parametrize("img_s, batch, util, cpu_ms, verdict", [
    (4360, 256, 92, 55, "compute"),  # AMP + channels-last, batch 256
    (1000, 32, 71, 30, "host"),  # fp32, batch 32: the busiest of its runs
    (1100, 32, 62, 29, "host"),  # ... and the least busy
    (1750, 64, 30, 30, "host"),  # 160 px, batch 64, AMP
])
def test_the_h100_runs_come_out_as_measured(img_s, batch, util, cpu_ms, verdict):
    found = diagnosis.diagnose(h100_record(img_s, batch, util, cpu_ms))
    assert found["verdict"] == verdict, found
    assert found["figures"]["device_busy"] == pytest.approx(util / 100)
    assert found["figures"]["host_cpu_ms_per_step"] == pytest.approx(cpu_ms, rel=1e-3)
    assert found["hint"] == diagnosis.HINTS["compute-cuda" if verdict == "compute" else "host"]


def test_the_host_verdict_says_how_busy_the_gpu_was_and_what_the_host_spent():
    found = diagnosis.diagnose(h100_record(1750, 64, 30, 30))
    assert found["why"] == ("the GPUs worked 30% of the step (NVML utilisation) and waited the rest, neither for data "
                            "nor for the exchange: the host launches their work too slowly (30 ms of CPU per step)")


def test_the_gpus_own_time_for_a_step_decides_where_the_case_measured_it():
    """The 160 px run with its pass timed on the GPU (30% of its 36.6 ms step): host-bound, whatever a
    coarse NVML figure says; the batch-256 run's pass (92% of its step): compute-bound."""
    step_160 = 64 / 1750
    found = diagnosis.diagnose(h100_record(1750, 64, None, 30, gpu_pass_s=0.30 * step_160))
    assert found["verdict"] == "host" and found["figures"]["gpu_pass_busy"] == pytest.approx(0.30, abs=1e-3)
    assert "(its forward and backward pass, timed on the GPU)" in found["why"]
    found = diagnosis.diagnose(h100_record(4360, 256, 50, 55, gpu_pass_s=0.92 * 256 / 4360))
    assert found["verdict"] == "compute" and found["figures"]["device_busy"] == 0.5


def test_several_gpus_without_a_measured_exchange_are_not_called_host_bound():
    """Two GPUs, 62% busy, and nothing measured of the exchange: the host or the all-reduce; unknown."""
    found = diagnosis.diagnose(h100_record(2000, 32, 62, 29, devices=2))
    assert found["verdict"] == "unknown", found
    assert diagnosis.classify({**found["figures"], "exchange": 0.05}, "cuda", 2)[0] == "host"


def test_the_threshold_lies_between_the_busiest_host_bound_and_the_compute_bound_run():
    assert 0.71 < diagnosis.BUSY["cuda"] <= 0.92
