import subprocess
import sys

import pytest

from conftest import ROOT
from fixture_records import make_record
from suite.scaling import Exchange, Model, fit

G = 25_557_032 * 4


@pytest.mark.parametrize("kind, per_node", [("ring", 1), ("parameter-server", 4)])
def test_fit_recovers_a_known_model(kind, per_node):
    truth = Model(Exchange(kind, G, per_node), 64, compute_s=0.30, seconds_per_byte=1 / 10e9, latency_s=2e-3,
                  fitted_on=())
    measured = {n: truth.throughput(n) for n in (1, 2, 4, 8, 16, 32)}
    model = fit(measured, truth.exchange, 64)
    assert model.compute_s == pytest.approx(0.30, rel=1e-6)
    for n in (64, 128):
        assert model.throughput(n) == pytest.approx(truth.throughput(n), rel=1e-6)


def test_ring_traffic_and_efficiency():
    ring = Exchange("ring", 1000.0)
    assert ring.traffic(1) == (0.0, 0.0) and ring.traffic(4) == (1500.0, 6.0)
    ps = Exchange("parameter-server", 1000.0, devices_per_node=4)
    assert ps.traffic(4) == (0.0, 0.0) and ps.traffic(16) == (2000.0, 4.0)
    model = Model(ring, 32, 0.1, 1e-6, 0.0, ())
    assert model.efficiency(1) == pytest.approx(1.0) and model.efficiency(4) < 1.0


def test_given_network_fits_only_compute():
    model = fit({1: 100.0, 4: 350.0}, Exchange("ring", G), 32, bandwidth_gbit_s=100, latency_us=2)
    assert model.bandwidth_gbit_s == pytest.approx(100) and model.latency_s == pytest.approx(2e-6)


def test_docs_validation_tables_match_the_model():
    sys.path.insert(0, str(ROOT / "tools"))
    from scaling_validation import DOC, render

    text = DOC.read_text()
    assert render(text) == text, "docs/scaling.md is stale: run python tools/scaling_validation.py"
    assert "| 64 | 7080 |" in text and "| 32 | 5796 |" in text  # the published points it was not fitted to


def test_predict_from_records_and_profile(tmp_path):
    results = tmp_path / "results"
    for devices, rate in [(1, 100.0), (2, 95.0), (4, 88.0)]:
        make_record(results, tmp_path / "runs", cluster="localhost", devices=devices, per_device=(rate,))
    args = [sys.executable, "-m", "suite", "predict", "--case", "pytorch-synthetic", "--devices", "8,16",
            "--results-dir", str(results)]
    fitted = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert fitted.returncode == 0, fitted.stderr
    assert "network: fitted from the measurements" in fitted.stdout and "3 record(s) of pytorch-synthetic" in fitted.stdout
    rows = {int(line.split()[0]): line.split() for line in fitted.stdout.splitlines() if line.split() and line.split()[0].isdigit()}
    assert set(rows) == {1, 2, 4, 8, 16} and float(rows[16][1]) > float(rows[8][1])
    missing = subprocess.run(args + ["--cluster", "cte-power"], cwd=ROOT, capture_output=True, text=True)
    assert "no successful records of pytorch-synthetic on cte-power" in missing.stderr and missing.returncode == 2
    make_record(results, tmp_path / "runs", cluster="cte-power", devices=4, per_device=(90.0,))
    profiled = subprocess.run(args + ["--cluster", "cte-power"], cwd=ROOT, capture_output=True, text=True)
    assert profiled.returncode == 0, profiled.stderr
    assert "network: from the cluster profile (InfiniBand EDR" in profiled.stdout
    assert "effective bandwidth 100.00 Gbit/s, latency 2.0 us" in profiled.stdout
