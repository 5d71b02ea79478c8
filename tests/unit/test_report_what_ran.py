"""The report says what ran: each case's throughput in its own unit (tokens/s, img/s) on its axes, in the
index and the CSV; no image size for a token case; one series per configuration that changes the work
or the speed (parallel mode, compile and its mode, preset, optimizer implementation), a setting a record
lacks read as the case's default; and with one device count a sentence instead of empty speedup plots."""

import copy
import csv
import re

import pytest
from support.fixture_records import make_record, make_token_record

from suite.analysis import report, what_ran
from suite.records.read import Point, load_points


def built(results):
    return report.build_series(load_points(results))


def throughput_axis(case, series) -> str:
    throughput = report.case_figures(case, series)[0]
    assert "throughput" in throughput.layout.title.text
    return throughput.layout.yaxis.title.text


@pytest.fixture
def dirs(tmp_path):
    return tmp_path / "results", tmp_path / "runs"


def test_a_token_case_counts_tokens_per_second_and_an_image_case_images(dirs):
    results, runs = dirs
    for devices in (1, 2):
        make_token_record(results, runs, devices=devices, per_device=(1000.0,))
        make_record(results, runs, devices=devices, per_device=(50.0,))
    series = built(results)
    gpt = [s for s in series if s.case == "pytorch-gpt"]
    images = [s for s in series if s.case == "pytorch-synthetic"]
    assert [s.unit for s in gpt] == ["tokens/s"] and [s.unit for s in images] == ["img/s"]
    assert throughput_axis("pytorch-gpt", gpt) == "tokens/s, all devices"
    assert throughput_axis("pytorch-synthetic", images) == "img/s, all devices"
    per_device = report.frameworks_figures(series)[0]
    assert per_device.layout.yaxis.title.text == "per device, each case in its unit (img/s or tokens/s)"
    assert any(t.name.startswith("pytorch-gpt (tokens/s): ") for t in per_device.data)
    assert all("tokens/s" in text for t in per_device.data if "pytorch-gpt" in t.name for text in t.hovertext)

    out = results.parent / "site"
    report.write_report(results, out, warn=lambda message: None)
    index = (out / "index.html").read_text()
    assert "<th>throughput</th>" in index and "<th>img/s</th>" not in index  # two units: each cell says
    assert "2000.0 ± " in index and " tokens/s</td>" in index and " img/s</td>" in index
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert {(r["case"], r["unit"]) for r in rows} == {("pytorch-gpt", "tokens/s"), ("pytorch-synthetic", "img/s")}


def test_one_unit_is_named_in_the_index_headings(dirs):
    results, runs = dirs
    make_token_record(results, runs, devices=2, per_device=(1000.0,))
    assert report.index_heads({s.unit for s in built(results)}) == (
        "tokens/s", "tokens/s per device", "J/token")
    assert report.index_heads({"img/s"}) == ("img/s", "img/s per device", "J/img")


def test_the_unit_comes_from_the_record_else_from_the_case(dirs):
    results, runs = dirs
    record = make_token_record(results, runs, devices=2, per_device=(1000.0,))
    assert what_ran.unit_of(Point(record, "r.json")) == "tokens/s"
    without = copy.deepcopy(record)
    del without["metrics"]["throughput"]["unit"]
    assert what_ran.unit_of(Point(without, "r.json")) == "tokens/s"  # pytorch-gpt's case.toml: unit = "tokens"
    without["case"] = "pytorch-synthetic"
    assert what_ran.unit_of(Point(without, "r.json")) == "img/s"
    without["case"] = "a-case-from-elsewhere"
    assert what_ran.unit_of(Point(without, "r.json")) == "img/s"


def test_a_token_case_has_no_image_size_in_its_names(dirs):
    results, runs = dirs
    make_token_record(results, runs, devices=2, per_device=(1000.0,))
    make_record(results, runs, devices=2, per_device=(50.0,))
    series = {s.case: s for s in built(results)}
    gpt = series["pytorch-gpt"]
    assert gpt.config_label.startswith("gpt2-small, batch 4/device, float32")
    assert "px" not in gpt.label and "None" not in gpt.label
    hover = report.case_figures("pytorch-gpt", [gpt])[0].data[0].hovertext[0]
    assert "px" not in hover and "None" not in hover
    assert series["pytorch-synthetic"].config_label.startswith("resnet50-v1.5, 224 px, batch 32/device")


def test_ddp_fsdp_and_compiled_records_of_one_batch_are_separate_series(dirs):
    results, runs = dirs
    for devices in (1, 2):
        make_token_record(results, runs, devices=devices, parallel="ddp", per_device=(1000.0,))
        make_token_record(results, runs, devices=devices, parallel="fsdp", per_device=(800.0,))
        make_token_record(results, runs, devices=devices, parallel="ddp", compile=True, per_device=(1300.0,))
    series = built(results)
    assert len(series) == 3 and all([p.devices for p in s.points] == [1, 2] for s in series)
    by_label = {s.label: s for s in series}
    assert len(by_label) == 3
    differ = {tuple(s.config_label.split(", ")[3:5]): s.points[-1].throughput["per_device"] for s in series}
    assert sorted(differ) == [("ddp", "compiled (mode default)"), ("ddp", "not compiled"), ("fsdp", "not compiled")]
    assert differ[("fsdp", "not compiled")] == pytest.approx(800, rel=0.02)
    assert differ[("ddp", "compiled (mode default)")] == pytest.approx(1300, rel=0.02)
    assert all(s.config_label.startswith("gpt2-small, batch 4/device, float32, ") for s in series)
    throughput = report.case_figures("pytorch-gpt", series)[0]
    measured = [t.name for t in throughput.data if t.name.startswith("cluster-a")]  # not the published, the model
    assert sorted(n.split(", ")[3] for n in measured) == ["ddp", "ddp", "fsdp"]


def test_the_compile_mode_and_the_optimizer_implementation_make_their_own_series(dirs):
    results, runs = dirs
    make_token_record(results, runs, devices=2, compile=True, per_device=(1300.0,))
    make_token_record(results, runs, devices=2, compile=True, reported={"compile_mode": "max-autotune"},
                      per_device=(1400.0,))
    make_token_record(results, runs, devices=2, reported={"optimizer_impl": "fused"}, per_device=(1100.0,))
    make_token_record(results, runs, devices=2, per_device=(1000.0,))
    labels = sorted(s.config_label for s in built(results))
    assert len(labels) == 4
    assert sum("compiled (mode max-autotune)" in label for label in labels) == 1
    assert sum("compiled (mode default)" in label for label in labels) == 1
    assert sum("not compiled" in label for label in labels) == 2
    assert sum("optimizer fused" in label for label in labels) == 1
    assert sum("optimizer foreach" in label for label in labels) == 3


def test_a_preset_makes_its_own_series(dirs):
    results, runs = dirs
    make_record(results, runs, devices=2, per_device=(50.0,))
    make_record(results, runs, devices=2, per_device=(90.0,), options=["--preset", "dle"])
    labels = sorted(s.config_label for s in built(results))
    assert len(labels) == 2 and any("preset dle" in label for label in labels)
    assert any("no preset" in label for label in labels)


def test_a_setting_a_record_lacks_reads_as_the_cases_default(dirs):
    """A record older than --parallel and --compile (neither in its config) joins the ddp, not compiled
    series of the newer records: one series over both device counts."""
    results, runs = dirs
    old = make_token_record(results, runs, devices=1, per_device=(1000.0,),
                            without=("parallel", "compile", "compile_mode", "optimizer_impl", "preset"))
    assert not {"parallel", "compile", "optimizer-impl"} & set(old["config"]["options"])
    assert not {"parallel", "compile", "optimizer_impl"} & set(old["config"]["reported_by_case"])
    new = make_token_record(results, runs, devices=2, parallel="ddp", per_device=(950.0,),
                            reported={"optimizer_impl": "auto"})
    make_token_record(results, runs, devices=2, parallel="fsdp", per_device=(900.0,),
                      reported={"optimizer_impl": "auto"})
    series = built(results)
    [ddp] = [s for s in series if s.settings[0] == "ddp"]
    assert [p.record["run_id"] for p in ddp.points] == [old["run_id"], new["run_id"]]
    assert len(series) == 2 and what_ran.settings_of(Point(old, "o.json")) == ddp.settings
    assert ddp.label.endswith("float32, ddp, context 32 tokens)")  # the default is not named where all share it


def test_with_one_device_count_a_sentence_stands_for_speedup_and_efficiency(dirs):
    results, runs = dirs
    make_token_record(results, runs, devices=2, parallel="ddp", per_device=(1000.0,))
    make_token_record(results, runs, devices=2, parallel="fsdp", per_device=(900.0,))
    series = built(results)
    sentence = ("Speedup and efficiency need runs at two or more device counts; these records have only "
                "2 devices.")
    assert report.one_count_sentence(series) == sentence
    figures = report.case_figures("pytorch-gpt", series)
    assert not any(w in f.layout.title.text for f in figures for w in ("speedup", "efficiency"))
    parts = report.case_parts("pytorch-gpt", series)
    assert parts[-1] == f'<p class="note">{sentence}</p>' and parts[:-1] == figures
    out = results.parent / "site"
    report.write_report(results, out, warn=lambda message: None)
    page = (out / "case-pytorch-gpt.html").read_text()
    assert sentence in page and "speedup over" not in page and "None px" not in page
    assert sentence in (out / "frameworks.html").read_text()
    assert "efficiency" not in headings_of((out / "index.html").read_text())  # no row has one
    assert all(r["speedup"] == "" and r["efficiency_pct"] == "" for r in csv.DictReader(open(out / "summary.csv")))


def test_the_sentence_names_one_device_and_several_single_counts(dirs):
    results, runs = dirs
    make_token_record(results, runs, devices=1, per_device=(1000.0,))
    assert report.one_count_sentence(built(results)).endswith("these records have only 1 device.")
    make_token_record(results, runs, devices=2, parallel="fsdp", per_device=(900.0,))
    assert report.one_count_sentence(built(results)).endswith(
        "each configuration here ran at one only (1 or 2 devices).")
    make_token_record(results, runs, devices=4, parallel="fsdp", per_device=(900.0,))
    series = built(results)
    assert report.one_count_sentence(series) is None
    assert report.case_parts("pytorch-gpt", series) == report.case_figures("pytorch-gpt", series)
    assert any("speedup" in f.layout.title.text for f in report.case_figures("pytorch-gpt", series))


def test_published_scaling_keeps_its_plots_beside_the_sentence(dirs):
    """pytorch-synthetic publishes figures at several device counts: with the records at one count
    the sentence stands before the speedup and efficiency plots of those figures."""
    results, runs = dirs
    make_record(results, runs, devices=2, per_device=(50.0,))
    parts = report.case_parts("pytorch-synthetic", built(results))
    at = next(i for i, p in enumerate(parts) if isinstance(p, str))
    assert "speedup" in parts[at + 1].layout.title.text
    assert not any("cluster-a" in t.name for t in parts[at + 1].data)


def test_each_configuration_that_ran_more_than_once_has_its_history_over_time(dirs):
    """Every record of a configuration and device count, in the order they finished, the stack lock's
    change a new marker shape; a configuration that ran once, or another device count, not in it."""
    results, runs = dirs
    for day, rate, lock in [("01", 100.0, "ab" * 32), ("08", 98.0, "ab" * 32), ("15", 80.0, "cd" * 32)]:
        make_record(results, runs, devices=2, per_device=(rate,), lock=lock, finished_at=f"2026-11-{day}T10:00:00Z")
    make_record(results, runs, devices=4, per_device=(90.0,), finished_at="2026-11-02T10:00:00Z")
    make_record(results, runs, case="tf-cifar", stack="tensorflow", devices=1, epochs=[60.0, 40.0])
    points = load_points(results)
    series = report.build_series(points)
    history = report.history_figure("pytorch-synthetic", points, series)
    [trace] = history.data
    assert list(trace.x) == ["2026-11-01 10:00:00", "2026-11-08 10:00:00", "2026-11-15 10:00:00"]
    assert [round(y) for y in trace.y] == [200, 196, 160]  # all devices
    assert list(trace.marker.symbol) == ["circle", "circle", "square"]
    assert trace.name == "cluster-a / pytorch-horovod (resnet50-v1.5, 224 px, batch 32/device, float32), 2 device(s)"
    assert history.layout.xaxis.type == "date" and history.layout.yaxis.title.text == "img/s, all devices"
    assert report.history_figure("tf-cifar", points, series) is None


def test_the_terminal_tables_count_a_token_case_in_tokens(dirs, capsys):
    """A sweep's table, compare's and predict's say tokens/s for a case measured in tokens, img/s for the others."""
    from suite.analysis.compare import compare, format_rows
    from suite.analysis.prediction import predict
    from suite.analysis.sweeps import print_sweep, summarize_sweep

    results, runs = dirs
    made = [(make_token_record(results, runs, case="jax-gpt", parallel="dp", devices=d,
                                 per_device=(1000.0 - d,)), f"{d}.json")
            for d in (1, 2, 4)]
    print_sweep(summarize_sweep("s", made, None), results / "s.json")
    table = capsys.readouterr().out
    assert "tokens/s" in table.splitlines()[2] and "img/s" not in table
    rows = compare(load_points(results), load_points(results), tolerance=0.05)
    assert all(line.split()[6] == "tokens/s" for line in format_rows(rows).splitlines()[1:])
    assert "predicted tokens/s" in predict("jax-gpt", [8], results)
    images = results.parent / "images"
    for d in (1, 2):
        make_record(images, runs, devices=d, per_device=(50.0,))
    assert "predicted img/s" in predict("pytorch-synthetic", [8], images)


def headings_of(index: str) -> list[str]:
    return re.findall(r"<th>([^<]*)</th>", index)


def test_the_index_leaves_out_a_column_no_row_has_a_figure_for(dirs):
    """One device count, no energy, diagnosis, MFU or published figure: none of their columns; the device
    count the figures come from in bold and the finish time to the minute, the whole one as its tooltip."""
    results, runs = dirs
    made = make_record(results, runs, devices=2, per_device=(50.0,))
    out = results.parent / "site"
    report.write_report(results, out, warn=lambda message: None)
    index = (out / "index.html").read_text()
    assert headings_of(index) == ["case", "stack", "cluster", "configuration", "devices", "img/s", "img/s per device",
                                  "latest"]
    assert "<td><b>2</b></td>" in index
    finished = made["finished_at"]
    assert f'<td title="{finished}">{finished[:10]} {finished[11:16]}</td>' in index


def test_a_column_is_shown_where_one_row_has_a_figure(dirs):
    results, runs = dirs
    for devices in (1, 2):
        make_record(results, runs, devices=devices, per_device=(50.0,), work=(1e9, 4e11, "fp32"))
    make_record(results, runs, cluster="cluster-b", devices=2, per_device=(50.0,))
    out = results.parent / "site"
    report.write_report(results, out, warn=lambda message: None)
    index = (out / "index.html").read_text()
    assert headings_of(index) == ["case", "stack", "cluster", "configuration", "devices", "img/s", "img/s per device",
                                  "efficiency", "MFU", "latest"]
    assert "<td>1, <b>2</b></td>" in index and index.count(report.EMPTY_CELL) == 2  # cluster-b's two


def test_an_index_without_records_says_so_and_draws_no_table(dirs):
    results, _ = dirs
    results.mkdir(parents=True)
    out = results.parent / "site"
    report.write_report(results, out, warn=lambda message: None)
    index = (out / "index.html").read_text()
    assert "0 records used (no records)" in index and "<table" not in index
