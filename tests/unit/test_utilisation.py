"""Model FLOPs utilisation from records (datasheet table, measured peaks, published figures), records
without it still read, report and compare, and the report's figures read from their data: device
ticks, which series a speedup plot holds, legend labels, log axes, the index's MFU and bound cells."""

import json
import re

import pytest
from support.fixture_records import make_record

from suite.analysis import peaks, report
from suite.analysis.compare import compare
from suite.analysis.references import comparison, summary_line
from suite.analysis.utilisation import reference_mfu, utilisation
from suite.analysis.utilisation import summary_line as utilisation_line
from suite.instack.model_flops import training_flops_per_image
from suite.records.read import case_references, load_points
from suite.records.schema import SCHEMA_VERSION, validate

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("name, part", [
    (H100, "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-40GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"), ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"), ("Tesla V100S-PCIE-32GB", "V100S PCIe"), ("NVIDIA L40S", "L40S"),
    ("AMD Instinct MI250X/MI250", "MI250X (one die)"), ("AMD Instinct MI300X", "MI300X"), ("NVIDIA B200", "B200"),
    ("cpu", None), ("NVIDIA GB200", None), ("NVIDIA GeForce RTX 4090", None)])
def test_device_names_find_their_datasheet_part(name, part):
    assert peaks.part_of(name) == part


def test_datasheet_peaks_are_dense_and_ordered_by_precision():
    assert peaks.datasheet_peak(H100, "bf16")["flops_per_s"] == pytest.approx(989.4e12)
    assert peaks.datasheet_peak("NVIDIA A100-SXM4-80GB", "fp16")["flops_per_s"] == pytest.approx(312e12)
    assert peaks.datasheet_peak("cpu", "fp32") is None and peaks.datasheet_peak("Tesla V100-SXM2-16GB", "bf16") is None
    for part, table in peaks.DATASHEET.items():
        assert table["fp16"] >= table.get("tf32", table["fp32"]) >= table["fp32"] > 0, part
    assert peaks.precision_of("float32", "NVIDIA A100-SXM4-80GB") == "tf32"
    assert peaks.precision_of("float32", "Tesla V100-SXM2-16GB") == peaks.precision_of("float32", "cpu") == "fp32"
    assert peaks.precision_of("amp-bfloat16", "cpu") == "bf16" and peaks.precision_of("amp-float16", H100) == "fp16"


def test_architecture_counts_grow_with_the_image_area():
    at_224, source = training_flops_per_image("resnet50-v1.5", 224)
    assert at_224 == pytest.approx(3 * 2 * 4.1e9, rel=0.03) and "224 px" in source
    assert training_flops_per_image("resnet50", 448)[0] == pytest.approx(4 * at_224)
    assert training_flops_per_image("resnet50-v1", 224)[0] < at_224  # v1: the stride on the cheap 1x1
    assert training_flops_per_image("resnet50v2", 224) is None


def test_a_gpu_record_has_mfu_against_the_datasheet_and_the_measured_peak(tmp_path):
    record = make_record(tmp_path / "r", tmp_path / "runs", devices=2, per_device=(4000.0,),
                         device=(H100, "amp-float16"), work=(24.3e9, 700e12, "fp16"))
    used = record["metrics"]["utilisation"]
    per_device = record["metrics"]["throughput"]["per_device"]
    assert used["flops_per_step"] == pytest.approx(24.3e9 * 32 * 2)
    assert used["achieved_flops_per_s"] == pytest.approx(2 * used["achieved_flops_per_s_per_device"])
    assert used["mfu_datasheet"] == pytest.approx(per_device * 24.3e9 / 989.4e12, rel=1e-3)
    assert used["mfu_measured"] == pytest.approx(per_device * 24.3e9 / 700e12, rel=1e-3)
    assert used["datasheet_part"] == "H100 SXM" and used["measured_peak"]["ranks"] == 2
    assert "MFU 9.8% of the H100 SXM datasheet's fp16 peak 989 TFLOP/s" in utilisation_line(used)
    assert "MFU 13.9% of the measured fp16 matmul peak 700 TFLOP/s" in utilisation_line(used)
    assert used["valid"] is True and used["invalid_reason"] is None
    validate(record)


def test_an_mfu_above_one_marks_the_utilisation_invalid_and_is_never_plotted(tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"
    record = make_record(results, runs, devices=2, per_device=(4000.0,), device=(H100, "amp-float16"),
                         work=(24.3e9, 50e12, "fp16"))  # 97 TFLOP/s per device against a peak of 50
    used = record["metrics"]["utilisation"]
    assert used["valid"] is False and used["mfu_measured"] > 1 and used["mfu_datasheet"] < 1
    assert used["invalid_reason"].startswith("MFU 1.94 against the measured matmul peak: above 1")
    assert utilisation_line(used).endswith(f"MFU invalid: {used['invalid_reason']}")
    assert report.mfu_cell(used).startswith("invalid: MFU 1.94")
    validate(record)
    make_record(results, runs, devices=1, per_device=(4000.0,), device=(H100, "amp-float16"),
                work=(24.3e9, 700e12, "fp16"))
    [mfu] = [f for f in report.case_figures("pytorch-synthetic", report.build_series(load_points(results)))
             if "MFU" in f.layout.title.text]
    ours = [t for t in mfu.data if "cluster-a" in t.name]
    assert ours and all(list(t.x) == [1] for t in ours)  # the valid record only: not the 2-device one


def gpt_record(precision: str = "bf16", device_name: str = H100) -> dict:
    """A pytorch-gpt record at GPT-2 small: 16 sequences of 1,024 tokens a step over 2 devices."""
    return {"config": {"dtype": "amp-bfloat16", "global_batch": 16,
                       "reported_by_case": {"device_name": device_name, "global_tokens_per_step": 16 * 1024}},
            "world": {"device_type": "cuda"}, "provenance": {"host_info": {}},
            "metrics": {"throughput": {"unit": "tokens/s", "mean": 200_000.0, "per_device": 100_000.0}},
            "repetitions": [{"work": {"flops_per_sample": 855.38e6, "source": "6 N + 12 L H Q T",
                                      "precision": precision},
                             "peaks": [{"flops_per_s": 700e12, "precision": precision}]}]}


def test_flops_per_step_are_in_the_unit_the_case_counts():
    used = utilisation(gpt_record())
    assert used["flops_per_step"] == pytest.approx(855.38e6 * 16 * 1024)  # per token x tokens, not x sequences
    assert used["sample"] == "token" and "GFLOP per token per training step" in utilisation_line(used)
    assert used["mfu_datasheet"] == pytest.approx(100_000 * 855.38e6 / 989.4e12, rel=1e-6)


def test_tf32_on_a_gpu_without_tf32_is_set_against_its_fp32_peak():
    used = utilisation(gpt_record("tf32", "Tesla V100-SXM2-16GB"))
    assert used["precision"] == "fp32" and used["datasheet_peak_flops_per_s"] == pytest.approx(15.7e12)
    assert utilisation(gpt_record("fp32"))["datasheet_peak_flops_per_s"] == pytest.approx(67e12)  # true FP32 on an H100


def test_a_cpu_record_has_only_the_measured_mfu(tmp_path):
    record = make_record(tmp_path / "r", tmp_path / "runs", per_device=(20.0,), work=(0.5e9, 100e9, "fp32"))
    used = record["metrics"]["utilisation"]
    assert used["mfu_datasheet"] is None and used["datasheet_peak_flops_per_s"] is None
    assert used["mfu_measured"] == pytest.approx(20 * 0.5e9 / 100e9, rel=0.01)


def test_published_figures_carry_their_mfu():
    refs = {r["source"]: r for r in case_references("pytorch-ddp")}
    mlperf = next(r for s, r in refs.items() if s.startswith("MLPerf") and "H100" in s)
    dle_amp = next(r for s, r in refs.items() if "DeepLearningExamples" in s and r["precision"] == "amp")
    assert reference_mfu(mlperf)[0] == pytest.approx(0.18, abs=0.01)  # 7,160 img/s per H100 x 24.3 GFLOP / 989 TFLOP/s
    assert reference_mfu(dle_amp)[0] == pytest.approx(2470 * 24.3e9 / 312e12, rel=0.01)
    assert all(reference_mfu(r) is None for r in refs.values() if not r.get("gpu"))
    record = {"case": "pytorch-ddp", "config": {"dtype": "amp-float16", "batch_per_device": 256,
                                                "reported_by_case": {"device_name": "NVIDIA A100-SXM4-80GB"}},
              "world": {"devices": 1}, "metrics": {"throughput": {"per_device": 2000.0}},
              "provenance": {"versions": {"torch": "2.13"}}}
    found = comparison(record)
    assert found["published_mfu"] == pytest.approx(0.192, abs=0.001) and "MFU 19%" in summary_line(found)


def test_a_record_without_utilisation_reads_reports_and_compares(tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"
    old = make_record(tmp_path / "made", runs, devices=1, per_device=(50.0,))
    old["schema_version"] = 3
    assert "utilisation" not in old["metrics"] and all("work" not in r for r in old["repetitions"])
    validate(old)
    results.mkdir()
    (results / "old.json").write_text(json.dumps(old))
    make_record(results, runs, devices=2, per_device=(45.0,), work=(1e9, 1e11, "fp32"))
    points = load_points(results)
    assert len(points) == 2 and utilisation(old) is None
    out = tmp_path / "site"
    report.write_report(results, out)
    rows = (out / "summary.csv").read_text().splitlines()
    assert rows[0].endswith("flops_per_sample,achieved_flops_per_s,mfu_datasheet,mfu_measured")
    assert rows[1].endswith(",,,,") and not rows[2].endswith(",,,,")  # the old record has no utilisation
    assert [r.verdict for r in compare(points, points, tolerance=0.05)]
    assert SCHEMA_VERSION == 4 and make_record(tmp_path / "new", runs)["schema_version"] == 4


@pytest.fixture
def series(tmp_path):
    """pytorch-synthetic on two clusters: cluster-a at 1, 2, 4 devices with utilisation; cluster-b once
    at 2 devices; and on cluster-c two series that differ only in their data."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    for devices, rate in [(1, 100.0), (2, 95.0), (4, 85.0)]:
        make_record(results, runs, devices=devices, per_device=(rate,), work=(1e9, 4e11, "fp32"))
    make_record(results, runs, cluster="cluster-b", devices=2, per_device=(90.0,))
    for data in ("synthetic", "imagefolder"):
        make_record(results, runs, cluster="cluster-c", devices=1, per_device=(20.0,), data=data)
        make_record(results, runs, cluster="cluster-c", devices=2, per_device=(19.0,), data=data)
    return report.build_series(load_points(results)), results, tmp_path / "site"


def names(figure) -> list[str]:
    return [trace.name for trace in figure.data]


def test_device_ticks_are_the_device_counts_once(series):
    built, _, _ = series
    for figure in report.case_figures("pytorch-synthetic", built) + report.frameworks_figures(built):
        ticks = list(figure.layout.xaxis.tickvals)
        assert ticks == sorted(set(ticks)) and set(ticks) >= {1, 2}
        assert list(figure.layout.xaxis.ticktext) == [str(t) for t in ticks]


def test_speedup_and_efficiency_hold_only_series_of_two_or_more_points(series):
    built, _, _ = series
    throughput, mfu, speedup, efficiency = report.case_figures("pytorch-synthetic", built)
    for figure in (speedup, efficiency):
        shown = names(figure)
        assert not any("cluster-b" in n for n in shown)  # one device count: no speedup to show
        assert not any("MLPerf" in n for n in shown)  # a published figure at 8 GPUs only
        assert any("cluster-a" in n for n in shown) and any("PRACE" in n for n in shown)
    assert any("cluster-b" in n for n in names(throughput)) and any("MLPerf" in n for n in names(throughput))
    assert speedup.data[-1].name == "ideal" and list(speedup.data[-1].x) == sorted(set(speedup.data[-1].x))


def test_legend_labels_are_unique_and_name_what_differs(series):
    built, _, _ = series
    labels = [s.label for s in built]
    assert len(labels) == len(set(labels))
    assert sorted(s.distinct for s in built if s.cluster == "cluster-c") == [", data imagefolder", ", data synthetic"]
    assert all(s.distinct == "" for s in built if s.cluster != "cluster-c")


def test_legend_labels_keep_data_paths_that_share_a_prefix_apart(tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"
    paths = ("/scratch/project/imagenet/train.rec", "/scratch/project/imagewoof/train.rec")
    for data in paths:
        make_record(results, runs, cluster="cluster-c", devices=1, per_device=(20.0,), data=data)
    built = report.build_series(load_points(results))
    assert sorted(s.distinct for s in built) == [f", data {path}" for path in paths]


def test_throughput_is_log_scaled_and_mfu_stands_beside_it(series):
    built, _, _ = series
    throughput, mfu = report.case_figures("pytorch-synthetic", built)[:2]
    assert throughput.layout.yaxis.type == "log" and throughput.layout.updatemenus[0].active == 1
    assert report.frameworks_figures(built)[0].layout.yaxis.type == "log"
    assert "MFU" in mfu.layout.title.text
    ours = [t for t in mfu.data if "cluster-a" in t.name]
    assert [t.name.endswith("vs measured matmul") for t in ours] == [True]  # a CPU: no datasheet peak
    assert list(ours[0].y) == pytest.approx([100 * r * 1e9 / 4e11 for r in (100, 95, 85)], rel=0.02)
    assert any("DeepLearningExamples" in t.name for t in mfu.data)  # published figures with known FLOPs
    assert "MFU" in ours[0].hovertext[0] and "MFU" in throughput.data[0].hovertext[0]


def test_index_shows_mfu_and_short_cells_with_their_sentences_as_tooltips(series, tmp_path):
    _, results, out = series
    record = next(r for r in (json.loads(f.read_text()) for f in results.glob("*.json"))
                  if r["world"]["cluster"] == "cluster-b")  # its series' one point: the index's row
    record["metrics"]["diagnosis"] = {"verdict": "compute", "device": "cpu", "figures": {},
                                      "why": "the workers kept their cores busy 98% of the window",
                                      "hint": "more cores"}
    record["metrics"]["published"] = {"source": "NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX A100",
                                      "gpu": "A100", "precision": "amp", "ratio": 0.61, "published_per_device": 2470.0,
                                      "published_mfu": 0.192}
    (results / "with-diagnosis.json").write_text(json.dumps({**record, "run_id": record["run_id"] + "x",
                                                            "finished_at": "2099-01-01T00:00:00Z"}))
    report.write_report(results, out)
    index = (out / "index.html").read_text()
    assert "<th>MFU</th>" in index and "of measured matmul" in index
    assert '<td title="the workers kept their cores busy 98% of the window">compute</td>' in index
    assert ('<td class="words" title="NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX A100">'
            '0.61x A100 amp (theirs: MFU 19%)</td>') in index


def test_a_gpu_the_case_does_not_name_is_found_in_what_nvidia_smi_listed():
    from suite.analysis.utilisation import device_name_of

    record = {"config": {"reported_by_case": {}}, "world": {"device_type": "cuda"},
              "provenance": {"host_info": {"node1": {"gpus": [{"name": "NVIDIA H200", "driver": "580.1"}]}}}}
    assert device_name_of(record) == "NVIDIA H200"
    record["world"]["device_type"] = "cpu"
    assert device_name_of(record) is None


class ProductsClock:
    """A perf_counter that moves only when a product runs: timings that do not depend on the machine's load."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def products_clock(monkeypatch) -> ProductsClock:
    import types

    import suite.instack.matmul_peak as matmul_peak

    clock = ProductsClock()
    monkeypatch.setattr(matmul_peak, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    return clock


def test_one_timing_routine_measures_every_cases_matmul_peak(monkeypatch):
    """suite/instack/matmul_peak.py times the products a case passes in (here: products that advance
    the routine's clock by 4 ms per 512-side product, growing with the side, so the machine's load
    plays no part), and no case times its own."""
    from pathlib import Path

    from suite.instack.matmul_peak import measure

    clock = products_clock(monkeypatch)
    found = measure(lambda n: n, lambda side, times: clock.advance(times * 0.004 * side / 512), "fp32",
                    largest=8192, shared_by=2, seconds=0.3)
    assert found["matrix"] == 4096 and found["shared_by"] == 2 and found["precision"] == "fp32"
    assert found["flops_per_s"] == pytest.approx(2 * 4096**3 / 0.032 / 2)
    cases = Path(__file__).resolve().parents[2] / "cases"
    sources = {p.relative_to(cases).as_posix(): p.read_text() for p in cases.rglob("*.py")}
    timing = [name for name, text in sources.items() if "n**3" in text]
    measuring = {name for name, text in sources.items() if re.search(r"matmul_peak import .*\bmeasure\b", text)}
    assert timing == [] and measuring == {"_shared/flops.py", "tf-cifar/work.py", "mxnet-imagenet/train.py",
                                          "_shared/jax_work.py"}
    sizing = {name for name, text in sources.items() if "largest_side(" in text}  # the sides: one rule for all
    assert sizing == measuring and not [name for name in measuring if "8192" in sources[name]]


def test_the_matmul_peak_is_timed_for_the_seconds_set_and_a_bad_setting_is_refused_before_launch(tmp_path,
                                                                                                 monkeypatch):
    """SUITE_MATMUL_PEAK_SECONDS (1 s where unset) is how long measure() times the products; `suite run` refuses a
    value that is not 0.1 to 600 seconds in one line, before anything starts."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from suite.instack.matmul_peak import SECONDS_VARIABLE, configured_seconds, measure

    assert configured_seconds({}) == 1.0 and configured_seconds({SECONDS_VARIABLE: "2.5"}) == 2.5
    for bad in ("0", "fast", "nan", "1e9"):
        with pytest.raises(ValueError, match=rf"^{SECONDS_VARIABLE}='{bad}': the seconds the matmul peak is timed"):
            configured_seconds({SECONDS_VARIABLE: bad})
    clock = products_clock(monkeypatch)
    monkeypatch.setenv(SECONDS_VARIABLE, "0.3")
    found = measure(lambda n: n, lambda side, times: clock.advance(times * 0.02), "fp32", largest=512)
    assert 0.3 <= found["seconds"] <= 0.3 + 0.02 * 5
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-ddp", "--runs-dir", str(tmp_path)],
                          cwd=root, env={**os.environ, SECONDS_VARIABLE: "0"}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: {SECONDS_VARIABLE}='0': the seconds the matmul peak is timed, from 0.1 to 600"]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("env, on_gpu, expected", [
    ({}, True, "fp32"),  # MXNet's defaults: no float32 inputs on tensor cores, whatever the GPU's name
    ({"MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION": "1"}, True, "tf32"),
    ({"MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION": "true", "MXNET_CUDA_ALLOW_TENSOR_CORE": "0"}, True, "fp32"),
    ({"MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION": "1", "NVIDIA_TF32_OVERRIDE": "0"}, True, "fp32"),
    ({"MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION": "1"}, False, "fp32"),
])
def test_mxnet_precision_is_read_from_its_settings(monkeypatch, env, on_gpu, expected):
    from cases._shared.mxnet_settings import precision

    for name in ("MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION", "MXNET_CUDA_ALLOW_TENSOR_CORE", "NVIDIA_TF32_OVERRIDE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert precision("float32", on_gpu) == expected and precision("float16", on_gpu) == "fp16"


def test_jax_gpt_stands_beside_a_jax_trainer_on_h100s_and_llm_c():
    """A JAX trainer's published figure (MaxText, another model: its MFU is the figure) whose tokens/s and MFU
    agree with its own FLOP count, beside llm.c's GPT-2 line that is set against records."""
    refs = {r["framework"]: r for r in case_references("jax-gpt")}
    maxtext, llmc = refs["JAX (MaxText)"], refs["llm.c (C/CUDA)"]
    assert llmc["gpu"] == "H100" and llmc["model"] == "gpt2-small"
    assert "gpu" not in maxtext and reference_mfu(maxtext) is None  # never set against a record's tokens/s
    flop_per_token = 1.82e15 / 4096  # the recipe's model FLOPs per 4,096-token sequence
    mfus = [t / d * flop_per_token / 989e12 for t, d in zip(maxtext["throughput"], maxtext["devices"])]
    assert mfus == pytest.approx([0.5259, 0.5204], abs=0.002)
    assert all(f"{100 * m:.2f}%" in maxtext["mfu_published"] for m in mfus)


@pytest.mark.parametrize("launch_s, flops_per_s, largest, tried", [
    (20e-6, 700e12, 8192, [512, 8192]),  # a GPU: small products are launch overhead, straight to the largest
    (0.0, 0.3e12, 4096, [512, 2048]),  # a CPU: 512 takes 0.9 ms, 2048 the ~20 ms wanted (1024 skipped)
    (0.0, 2e9, 4096, [512]),  # a slow CPU: 512 already takes long enough
])
def test_the_matmul_peaks_side_jumps_to_where_the_last_products_time_predicts(monkeypatch, launch_s, flops_per_s,
                                                                               largest, tried):
    """Each side tried costs a compilation (JAX, TensorFlow) and a kernel's set-up, so the sides tried are
    the few that the cubic growth of a product's time asks for, not every doubling."""
    from suite.instack.matmul_peak import measure

    clock, squares = products_clock(monkeypatch), []

    def square(n: int) -> int:
        squares.append(n)
        return n

    found = measure(square, lambda n, times: clock.advance(times * (launch_s + 2 * n**3 / flops_per_s)), "bf16",
                    largest=largest, seconds=0.2)
    assert sorted(set(squares)) == tried and found["matrix"] == tried[-1]
    assert found["flops_per_s"] == pytest.approx(2 * tried[-1] ** 3 / (launch_s + 2 * tried[-1] ** 3 / flops_per_s))
