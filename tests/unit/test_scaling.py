import re
import subprocess
import sys

import pytest
from conftest import ROOT
from support.fixture_records import allreduce_sweep, make_record

from suite.analysis.prediction import recorded_network
from suite.analysis.scaling import Exchange, Measurements, Model, exchange_for, fit
from suite.analysis.scaling_validation import validate_on_published
from suite.base import paths
from suite.inputs.cases import load_case

sys.path.insert(0, str(ROOT / "tools"))
from scaling_validation import DOC, VALIDATIONS, render

G = 25_557_032 * 4  # ResNet-50's parameters x 4 bytes


def simulated_step_seconds(kind: str, n: int, per_node: int, compute: float, bytes_per_s: float,
                           latency: float) -> float:
    """One step on n devices, written out from the exchange protocols rather than from suite.analysis.scaling."""
    if kind == "ring":
        # reduce-scatter, then all-gather: 2 (n-1) rounds, in each a device sends one G/n chunk
        rounds = 2 * (n - 1)
        return compute + sum(G / n for _ in range(rounds)) / bytes_per_s + rounds * latency
    workers = -(-n // per_node)
    if workers == 1:
        return compute  # one node reduces in place: nothing crosses the network
    # each worker pushes a G/W shard to each of the W servers and pulls it back, all through its own link
    link = sum(2 * G / workers for _server in range(workers))
    return compute + link / bytes_per_s + workers * latency


@pytest.mark.parametrize("kind, per_node", [("ring", 1), ("parameter-server", 4)])
@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_fit_on_simulated_steps_predicts_held_out_device_counts(kind, per_node, noise):
    truth = {"compute": 0.30, "bytes_per_s": 10e9 / 8, "latency": 2e-3}  # 10 Gbit/s, 2 ms per hop

    def throughput(n):
        return n * 64 / simulated_step_seconds(kind, n, per_node, **truth)

    jitter = {1: 1, 2: -1, 4: 1, 8: -1, 16: 1, 32: -1}  # +-noise, alternating
    measured = {n: throughput(n) * (1 + noise * j) for n, j in jitter.items()}
    model = fit(measured, Exchange(kind, G, per_node), 64)
    # Without noise, exact recovery; with +-1% (achieved today: compute and bandwidth within 1%, the
    # latency, the least determined, within 18%, held-out throughput within 2.2%):
    tight = 1e-6 if noise == 0 else None
    assert model.compute_s == pytest.approx(truth["compute"], rel=tight or 0.02)
    assert model.bandwidth_gbit_s == pytest.approx(10.0, rel=tight or 0.03)
    assert model.latency_s == pytest.approx(truth["latency"], rel=tight or 0.25)
    for n in (64, 128):  # held out: beyond every fitted device count
        assert model.throughput(n) == pytest.approx(throughput(n), rel=tight or 0.03)


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
    # By hand: step(1) = 32/100 s with no exchange; step(4) = 4 x 32/350 s, of which the ring moves
    # 2 x 3/4 x G bytes at 100 Gbit/s and takes 6 hops of 2 us; compute is the mean of what remains.
    one = 32 / 100
    four = 4 * 32 / 350 - (1.5 * G * 8) / 100e9 - 6 * 2e-6
    assert model.compute_s == pytest.approx((one + four) / 2, rel=1e-9)
    assert model.compute_s == pytest.approx(0.3367175, rel=1e-6)


def test_network_figures_that_leave_a_step_no_compute_are_refused_not_divided_by():
    """A check of another stack, or of a larger gradient, can measure an exchange longer than the runs' steps."""
    with pytest.raises(ValueError, match="the exchange alone outlasts the measured steps on 1, 4 devices"):
        fit({1: 100.0, 4: 350.0}, Exchange("ring", G), 32, bandwidth_gbit_s=0.1, latency_us=2)
    with pytest.raises(ValueError, match="leaves no compute time in a step"):  # all exchange, fitted
        fit({2: 2 * 32 / (G * 8 / 10e9), 4: 4 * 32 / (1.5 * G * 8 / 10e9)}, Exchange("ring", G), 32)


def test_the_gradient_exchanged_is_that_of_the_model_the_records_trained():
    """tf-cifar's [scaling] counts its default ResNet50V2; records of --model resnet18 exchange ResNet-18's."""
    spec = load_case("tf-cifar").spec
    trained = Measurements({2: 27.0}, 8, 1, "records", parameters=11_190_000)
    assert exchange_for(spec, trained).gradient_bytes == 11_190_000 * 4
    published = Measurements({2: 27.0}, 8, 1, "published")
    assert exchange_for(spec, published).gradient_bytes == spec["scaling"]["parameters"] * 4


def test_predict_takes_the_cases_own_interconnect_check_before_another_cases(tmp_path):
    """Each stack's exchange (ps-lite, Gloo, NCCL, gRPC) has effective figures of its own over the same links."""
    results, runs = tmp_path / "results", tmp_path / "runs"

    def checked(implementation):
        return lambda world, run_dir: {"interconnect": {**allreduce_sweep(world, run_dir / "precheck", 6),
                                                        "implementation": implementation}}

    own = make_record(results, runs, case="mxnet-imagenet", cluster="c", devices=2, nodes=2,
                      extra_metrics=checked("ps-lite"))
    make_record(results, runs, case="pytorch-ddp", cluster="c", devices=4, nodes=4, extra_metrics=checked("gloo"))
    found = recorded_network("mxnet-imagenet", "c", results)
    assert f"check of run {own['run_id']} (ps-lite, 2 ranks on 2 node(s))" in found["source"]
    assert "(gloo, 4 ranks on 4 node(s))" in recorded_network("jax-gpt", "c", results)["source"]  # none of its own


# |error| at most, in %, of each point the model did not see; docs/scaling.md states the same bounds
# (<!-- bounds -->). Each leaves 1 to 7 points of margin over what the model achieves today.
BOUNDS = {
    ("Table 8", "extrapolation"): {32: 3, 64: 35},  # 64: a known miss (+28%): the published collapse
    ("Table 8", "leave-one-out"): {1: 7, 4: 12, 8: 2, 16: 5, 32: 15, 64: 35},
    ("Table 9", "extrapolation"): {16: 3, 32: 8},
    ("Table 9", "leave-one-out"): {1: 10, 4: 2, 8: 2, 16: 2, 32: 3},
}


@pytest.mark.parametrize("case, published, fit_up_to", sorted(VALIDATIONS.values()))
def test_published_points_held_out_of_the_fit_are_predicted_within_bounds(case, published, fit_up_to):
    v = validate_on_published(case, published, fit_up_to)
    assert v.model.fitted_on == tuple(n for n in sorted(v.data.points) if n <= fit_up_to)
    extrapolation, loo = BOUNDS[published, "extrapolation"], BOUNDS[published, "leave-one-out"]
    assert v.held_out == sorted(extrapolation) and sorted(loo) == sorted(v.data.points)
    for n, bound in extrapolation.items():
        assert n not in v.model.fitted_on and abs(v.error_pct(n)) <= bound, (n, v.error_pct(n))
    for n, bound in loo.items():
        assert n not in v.leave_one_out[n].fitted_on and abs(v.loo_error_pct(n)) <= bound, (n, v.loo_error_pct(n))
    if published == "Table 8":  # docs/scaling.md says the model misses the 64-GPU collapse: keep it true
        assert v.error_pct(64) > 20


NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def assert_same_up_to_last_digit(shown: str, fresh: str) -> None:
    """The same text, with each number within one unit of its last shown digit (numbers from
    floating-point fits may round either way on another machine's BLAS, and a zero's sign may differ)."""
    stale = "docs/scaling.md is stale: run python tools/scaling_validation.py"
    assert NUMBER.sub("#", shown) == NUMBER.sub("#", fresh), stale
    for a, b in zip(NUMBER.findall(shown), NUMBER.findall(fresh)):
        unit = 10.0 ** -max(len((x.split(".") + [""])[1]) for x in (a, b))
        assert abs(float(a) - float(b)) <= 1.001 * unit, f"docs/scaling.md shows {a} where the model gives {b}"


def test_docs_validation_tables_match_the_model():
    text = DOC.read_text()
    assert_same_up_to_last_digit(text, render(text))
    assert "| 64 | 7080 | held out |" in text and "| 32 | 5796 | held out |" in text  # published, not fitted
    assert "| 8 | 1497 | fitted |" in text
    with pytest.raises(AssertionError):
        assert_same_up_to_last_digit(text, text.replace("| 32 | 5120 | held out | 5065 |",
                                                        "| 32 | 5120 | held out | 5067 |"))
    assert_same_up_to_last_digit("| 1 | 208 | fitted | 208 | (-0.0%) |", "| 1 | 208 | fitted | 208 | (0.0%) |")


def test_docs_state_the_asserted_bounds():
    block = re.search(r"<!-- bounds -->(.*?)<!-- /bounds -->", DOC.read_text(), re.S).group(1)
    stated = {}
    for line in block.strip().splitlines()[2:]:
        figures, check, bounds = [cell.strip() for cell in line.strip("| ").split("|")]
        key = (figures.split(" (")[0], "leave-one-out" if check == "leave-one-out" else "extrapolation")
        stated[key] = {int(n): float(b.rstrip("%")) for n, b in (item.split(": ") for item in bounds.split(", "))}
    assert stated == BOUNDS


def test_predict_from_records_and_profile(tmp_path):
    results = tmp_path / "results"
    for devices, rate in [(1, 100.0), (2, 95.0), (4, 88.0)]:
        make_record(results, tmp_path / "runs", cluster="localhost", devices=devices, per_device=(rate,))
    args = [sys.executable, "-m", "suite", "predict", "--case", "pytorch-synthetic", "--devices", "8,16",
            "--results-dir", str(results)]
    fitted = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert fitted.returncode == 0, fitted.stderr
    assert "network: fitted from the measurements" in fitted.stdout
    assert "3 record(s) of pytorch-synthetic" in fitted.stdout
    rows = {int(line.split()[0]): line.split() for line in fitted.stdout.splitlines()
            if line.split() and line.split()[0].isdigit()}
    assert set(rows) == {1, 2, 4, 8, 16} and float(rows[16][1]) > float(rows[8][1])
    missing = subprocess.run(args + ["--cluster", "cte-power"], cwd=ROOT, capture_output=True, text=True)
    assert "no successful records of pytorch-synthetic on cte-power" in missing.stderr and missing.returncode == 2
    make_record(results, tmp_path / "runs", cluster="cte-power", devices=4, per_device=(90.0,))
    profiled = subprocess.run(args + ["--cluster", "cte-power"], cwd=ROOT, capture_output=True, text=True)
    assert profiled.returncode == 0, profiled.stderr
    assert "network: from the cluster profile (InfiniBand EDR" in profiled.stdout
    network = re.search(r"effective bandwidth ([0-9.]+) Gbit/s, latency ([0-9.]+) us", profiled.stdout)
    assert network and float(network[1]) == pytest.approx(100) and float(network[2]) == pytest.approx(2)
    copy = tmp_path / "cte-power.toml"  # the same profile kept outside the checkout, given by its path
    copy.write_text((paths.HOSTFILES / "cte-power.toml").read_text())
    by_path = subprocess.run(args + ["--cluster", str(copy)], cwd=ROOT, capture_output=True, text=True)
    assert by_path.returncode == 0 and by_path.stdout == profiled.stdout, by_path.stderr
