"""make report on fixture records, rendered in headless Chromium (its run over real records of every case is
test_same_work.py's, beside the compare-frameworks runs it reads)."""

import contextlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CHROMIUM_FLAGS, ROOT
from support.fixture_records import make_record, make_token_record


def write_pages(results: Path, out: Path) -> subprocess.CompletedProcess:
    """`suite report` of the records in `results`, its pages in `out`."""
    return subprocess.run([sys.executable, "-m", "suite", "report", "--results-dir", str(results), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, check=True)


@contextlib.contextmanager
def chromium_tab(chromium: str):
    """A tab of headless Chromium, 1,280 x 900 pixels, closed with its browser after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    results, runs = base / "results", base / "runs"
    for devices, rate in [(1, 100.0), (2, 95.0), (4, 85.0)]:  # with the work its ranks reported: an MFU plot
        make_record(results, runs, cluster="cluster-a", devices=devices, per_device=(rate,), work=(1e9, 4e11, "fp32"))
    for devices, rate in [(1, 120.0), (2, 110.0)]:
        make_record(results, runs, cluster="cluster-b", devices=devices, per_device=(rate,), repetitions=2)
    for devices, epoch in [(1, 40.0), (2, 21.0)]:
        make_record(results, runs, case="tf-cifar", stack="tensorflow", devices=devices, epochs=[60.0, epoch, epoch])
    (results / "corrupt.json").write_text('{"schema_version": 1, "run_id": ')
    (results / "foreign.json").write_text(json.dumps({"hello": "world"}))
    out = base / "site"
    result = write_pages(results, out)
    return out, result


def test_report_writes_pages_and_skips_bad_files(report_dir):
    out, result = report_dir
    assert "skipped" in result.stderr and "corrupt.json" in result.stderr and "foreign.json" in result.stderr
    for name in ["index.html", "case-pytorch-synthetic.html", "case-tf-cifar.html", "frameworks.html", "summary.csv"]:
        assert (out / name).exists(), name
    index = (out / "index.html").read_text()
    assert "7 records used" in index and "2 file(s) skipped" in index
    assert index.count("<tr><td>") == 3  # pytorch-synthetic on two clusters, tf-cifar on one
    page = (out / "case-pytorch-synthetic.html").read_text()
    assert page.count("<script") >= 2 and "<script src" not in page  # plotly.js is embedded
    assert "PRACE Best Practice Guide" in page  # the published series
    assert "model: cluster-a" in page  # the scaling model fitted to a series


def test_csv_has_speedup_and_efficiency(report_dir):
    out, _ = report_dir
    import csv

    rows = list(csv.DictReader(open(out / "summary.csv")))
    a = {int(r["devices"]): r for r in rows if r["cluster"] == "cluster-a"}
    assert float(a[1]["speedup"]) == pytest.approx(1.0)
    assert float(a[4]["speedup"]) == pytest.approx(4 * 85 / 100, rel=0.01)
    assert float(a[4]["efficiency_pct"]) == pytest.approx(85, rel=0.01)
    tf = [r for r in rows if r["case"] == "tf-cifar"]
    assert sorted(float(r["epoch_seconds"]) for r in tf) == [21.0, 40.0]


@pytest.mark.parametrize("page, plots", [("case-pytorch-synthetic.html", 4), ("case-tf-cifar.html", 4),
                                         ("frameworks.html", 2), ("index.html", 0)])
def test_pages_render_offline_in_chromium(report_dir, page, plots, chromium):
    out, _ = report_dir
    errors, requests = [], []
    with chromium_tab(chromium) as tab:
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
        tab.goto((out / page).as_uri())
        tab.wait_for_load_state("load")
        if plots:
            tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        rendered = tab.eval_on_selector_all(
            ".js-plotly-plot", "els => els.map(e => e.querySelectorAll('.scatterlayer .trace').length)")
        ticks = tab.eval_on_selector_all(  # the devices axis as drawn: its labels, left to right
            ".js-plotly-plot", "els => els.map(e => [...e.querySelectorAll('.xtick text')].map(t => t.textContent))")
        shot = out / f"{page}.png"
        tab.screenshot(path=str(shot), full_page=True)
        page_width = tab.evaluate("document.documentElement.scrollWidth")
    assert errors == [] and requests == []
    assert page_width == 1280  # nothing makes the page scroll sideways
    assert len(rendered) == plots and all(traces > 0 for traces in rendered)
    for labels in ticks:  # every plot here is over device counts: each once, in order (not "0 1 1 2 4 8 16")
        assert labels and [int(t) for t in labels] == sorted({int(t) for t in labels}) and int(labels[0]) >= 1, labels
    png = shot.read_bytes()  # a whole page drawn: the PNG's own header, not its size (fonts vary)
    width, height = struct.unpack(">II", png[16:24])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width == 1280 and height >= 900


def every_figure(world, run_dir) -> dict:
    """What a GPU run's record adds to the index's row: a diagnosis, a published figure, energy."""
    return {"diagnosis": {"verdict": "host", "device": "cuda", "figures": {}, "hint": "a larger batch",
                          "why": "the GPUs were busy 61% of the window while the data loader kept up"},
            "published": {"source": "NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX H100", "gpu": "H100",
                          "precision": "amp", "ratio": 0.62, "published_per_device": 7160.0, "published_mfu": 0.3},
            "telemetry": {"interval_s": 1.0, "hosts": {}, "energy_j": 90.4, "joules_per_image": 0.113}}


def test_an_index_with_every_column_scrolls_its_table_not_the_page(tmp_path, chromium):
    """Every column filled (a wider table than a 1,280-pixel window holds): the table scrolls sideways inside
    the page, its first column staying in view, and the page itself does not."""
    results, runs, out = tmp_path / "results", tmp_path / "runs", tmp_path / "site"
    for devices, rate in [(1, 100.0), (2, 95.0)]:
        make_record(results, runs, cluster="a-cluster-with-a-long-name", devices=devices, per_device=(rate,),
                    work=(1e9, 4e11, "fp32"), extra_metrics=every_figure, device=("NVIDIA H100 80GB HBM3", "amp"))
    write_pages(results, out)
    with chromium_tab(chromium) as tab:
        tab.goto((out / "index.html").as_uri())
        headings = tab.eval_on_selector_all("th", "els => els.map(e => e.textContent)")
        widths = tab.evaluate("""() => {const t = document.querySelector('table');
            return {page: document.documentElement.scrollWidth, table: t.clientWidth, content: t.scrollWidth}}""")
        tab.eval_on_selector("table", "t => { t.scrollLeft = t.scrollWidth }")
        first = tab.eval_on_selector("td", "td => td.getBoundingClientRect().left - td.closest('table')"
                                           ".getBoundingClientRect().left")
    assert {"J/img", "efficiency", "bound", "MFU", "vs published"} <= set(headings)
    assert widths["page"] == 1280 and widths["content"] > widths["table"], widths
    assert abs(first) < 2  # the case column stayed at the table's left edge


@pytest.fixture(scope="module")
def token_report(tmp_path_factory):
    """pytorch-gpt's ddp and fsdp records of one batch size, at one device count (as a first run on one
    GPU node leaves them), reported."""
    base = tmp_path_factory.mktemp("token-report")
    results, runs = base / "results", base / "runs"
    for parallel, rate in [("ddp", 1000.0), ("fsdp", 900.0)]:
        make_token_record(results, runs, parallel=parallel, devices=2, per_device=(rate,))
    out = base / "site"
    write_pages(results, out)
    return out


def test_a_token_case_page_says_what_ran(token_report, chromium):
    """Its throughput axis in tokens/s, no image size, ddp and fsdp as two series, and a sentence where
    speedup and efficiency would be empty axes: as Chromium draws the page."""
    page = token_report / "case-pytorch-gpt.html"
    assert "None px" not in page.read_text()
    errors = []
    with chromium_tab(chromium) as tab:
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(page.as_uri())
        tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        drawn = tab.eval_on_selector_all(".js-plotly-plot", """els => els.map(e => ({
            title: e.querySelector('.gtitle')?.textContent,
            y: e.querySelector('.ytitle')?.textContent,
            legend: [...e.querySelectorAll('.legendtext')].map(t => t.textContent)}))""")
        text = tab.inner_text("body")
    assert errors == []
    [throughput] = [d for d in drawn if "throughput" in d["title"]]
    assert throughput["y"] == "tokens/s, all devices"
    ours = [name for name in throughput["legend"] if name.startswith("cluster-a")]
    assert len(ours) == 2 and sorted(name.split(", ")[3] for name in ours) == ["ddp", "fsdp"], ours
    assert all("px" not in name and "None" not in name for d in drawn for name in d["legend"])
    assert not any(w in d["title"] for d in drawn for w in ("speedup", "efficiency"))
    assert "Speedup and efficiency need runs at two or more device counts; these records have only 2 devices." in text
    assert "None px" not in text and "images/s" not in text


def test_records_are_validated_without_rechecking_the_schema_each_time(tmp_path, monkeypatch):
    """jsonschema.validate() checks the schema itself for every record (it was 96% of `report`).
    Valid records pass the compiled check alone; invalid ones go to jsonschema, built once."""
    import jsonschema

    import suite.records.index
    import suite.records.schema
    from suite.records.read import load_points

    record = make_record(tmp_path / "one", tmp_path / "runs", devices=2, per_device=(40.0,))
    for i in range(200):
        (tmp_path / "many").mkdir(exist_ok=True)
        (tmp_path / "many" / f"{i:03d}.json").write_text(json.dumps({**record, "run_id": f"{record['run_id']}-{i}"}))
    for i in range(3):  # records that fail the check: jsonschema names what is wrong
        (tmp_path / "many" / f"bad-{i}.json").write_text(json.dumps({**record, "case": i}))
    checks = []
    cls = jsonschema.validators.validator_for(suite.records.schema.SCHEMA)
    original = cls.check_schema
    monkeypatch.setattr(cls, "check_schema",
                        classmethod(lambda c, schema, **kw: checks.append(1) or original(schema, **kw)))
    monkeypatch.setattr(suite.records.schema, "_VALIDATOR", None)
    # all in this process, where the calls are counted
    monkeypatch.setattr(suite.records.index, "PARALLEL_FROM", 10_000)
    warnings = []
    assert len(load_points(tmp_path / "many", warn=warnings.append)) == 200
    assert len(warnings) == 3
    assert all(": not a valid record: case: " in w and "is not of type 'string'" in w for w in warnings)
    assert len(checks) == 1


def plotly_layouts(page: str) -> list[dict]:
    """The layout of every figure of a page, read from its Plotly.newPlot(id, data, layout, ...) call."""
    import re

    decoder, layouts = json.JSONDecoder(), []
    for call in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', page):
        _, end = decoder.raw_decode(page, call.end())
        layouts.append(decoder.raw_decode(page, end + re.match(r"\s*,\s*", page[end:]).end())[0])
    return layouts


def test_throughput_y_axis_is_log_and_switches_to_linear(report_dir, chromium):
    out, _ = report_dir
    page = (out / "case-pytorch-synthetic.html").read_text()
    layouts = plotly_layouts(page)
    assert len(layouts) == 4
    switched = [layout for layout in layouts if layout.get("updatemenus")]
    assert len(switched) == 1 and "throughput" in switched[0]["title"]["text"]  # only the throughput figure
    buttons = switched[0]["updatemenus"][0]["buttons"]
    assert [(b["label"], b["method"], b["args"]) for b in buttons] == [
        ("linear", "relayout", [{"yaxis.type": "linear"}]), ("log", "relayout", [{"yaxis.type": "log"}])]

    with chromium_tab(chromium) as tab:  # and the buttons work in a browser
        tab.goto((out / "case-pytorch-synthetic.html").as_uri())
        tab.wait_for_selector(".js-plotly-plot .updatemenu-button", timeout=30_000)
        y_type = "el => el.layout.yaxis.type"
        before = tab.eval_on_selector(".js-plotly-plot", y_type)
        tab.locator(".js-plotly-plot").first.locator(".updatemenu-button", has_text="linear").click()
        tab.wait_for_function("() => document.querySelector('.js-plotly-plot').layout.yaxis.type === 'linear'",
                              timeout=10_000)
        tab.locator(".js-plotly-plot").first.locator(".updatemenu-button", has_text="log").click()
        after = tab.eval_on_selector(".js-plotly-plot", y_type)
    assert before == "log" and after == "log"


def test_a_configuration_run_again_has_its_history_drawn_over_dates(tmp_path, chromium):
    """Three runs of one configuration on three days, the third on a new stack lock: a plot over dates, one
    line of three markers whose shape changes with the lock, as Chromium draws it."""
    results, runs, out = tmp_path / "results", tmp_path / "runs", tmp_path / "site"
    for day, rate, lock in [("01", 100.0, "ab" * 32), ("08", 98.0, "ab" * 32), ("15", 80.0, "cd" * 32)]:
        make_record(results, runs, devices=2, per_device=(rate,), lock=lock, finished_at=f"2026-11-{day}T10:00:00Z")
    write_pages(results, out)
    with chromium_tab(chromium) as tab:
        tab.goto((out / "case-pytorch-synthetic.html").as_uri())
        tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        drawn = tab.eval_on_selector_all(".js-plotly-plot", """els => els.map(e => ({
            title: e.querySelector('.gtitle')?.textContent,
            x: e.querySelector('.xtitle')?.textContent,
            ticks: [...e.querySelectorAll('.xtick text')].map(t => t.textContent),
            markers: [...e.querySelectorAll('.scatterlayer .trace .points path')].map(p => p.getAttribute('d'))}))""")
    [history] = [d for d in drawn if "over time" in d["title"]]
    assert history["x"] == "finished (UTC)" and any("Nov" in t for t in history["ticks"]), history["ticks"]
    assert len(history["markers"]) == 3 and len(set(history["markers"])) == 2  # circle, circle, square


GPU_NODE = {"hostname": "gpu01", "platform": "Linux-6.8-x86_64", "cpu_model": "AMD EPYC 7763", "logical_cpus": 128,
            "usable_cpus": 128, "memory_gib": 503.5,
            "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "580.159", "memory": "81559 MiB"}] * 4,
            "network": [{"name": f"mlx5_{i}/1", "type": "InfiniBand", "rate_gbit_s": 200, "state": "ACTIVE"}
                        for i in range(4)] + [{"name": "eno1", "type": "Ethernet", "rate_gbit_s": 25, "mtu": 1500,
                                               "state": "up"}]}


def interconnect(world, run_dir) -> dict:
    return {"interconnect": {"status": "ok", "reason": None, "implementation": "torch.distributed nccl",
                             "device": "cuda", "exchange": "ring", "ranks": 8, "nodes": 2, "iterations": 3,
                             "sizes": [{"bytes": 2**20, "latency_us": 60.0, "algbw_gb_s": 17.5, "busbw_gb_s": 30.6}],
                             "network": {"bandwidth_gbit_s": 741.0, "latency_us": 8.4, "largest_busbw_gb_s": 30.6},
                             "seconds": 4.0, "run_dir": str(run_dir)}}


def test_the_systems_page_says_what_each_cluster_is_beside_its_measured_network(tmp_path, chromium):
    """A GPU cluster whose records keep only their host facts (older records: the page describes them) and
    an interconnect check, beside a cluster of this machine: a row each, as Chromium shows the table."""
    results, runs, out = tmp_path / "results", tmp_path / "runs", tmp_path / "site"
    for nodes in (1, 2):
        made = make_record(results, runs, cluster="gpu-site", devices=4 * nodes, nodes=nodes, device=("H100", "bf16"),
                           extra_metrics=interconnect if nodes == 2 else None,
                           finished_at=f"2026-11-0{nodes}T10:00:00Z")
        path = results / f"{made['run_id']}.json"
        record = json.loads(path.read_text())
        record["provenance"]["host_info"] = {"gpu01": GPU_NODE}
        path.write_text(json.dumps(record))
    make_record(results, runs, cluster="laptop", devices=1)
    write_pages(results, out)
    with chromium_tab(chromium) as tab:
        tab.goto((out / "index.html").as_uri())
        tab.click("text=Systems")
        rows = tab.eval_on_selector_all("tr", "rows => rows.map(r => [...r.cells].map(c => c.innerText))")
    heads, gpu, laptop = rows
    gpu, laptop = dict(zip(heads, gpu)), dict(zip(heads, laptop))
    assert (gpu["cluster"], gpu["records"], gpu["most nodes"]) == ("gpu-site", "2", "2")
    assert gpu["processor"] == "AMD EPYC 7763, 128 vCPUs" and gpu["memory"] == "503.5 GiB"
    assert gpu["accelerators per node"] == "4x NVIDIA H100 80GB HBM3, 81559 MiB each"
    assert gpu["host networking"] == "4x 200 Gb/s InfiniBand, 1x 25 Gb/s Ethernet"
    assert gpu["network measured"].startswith("741 Gbit/s, 8.4 us per hop (measured by the interconnect check of run ")
    assert gpu["frameworks"] == "PyTorch 2.13.0" and gpu["latest"] == "2026-11-02T10:00:00Z"
    assert gpu["GPU software"] == "driver 580.159" and laptop["GPU software"] == "-"
    assert (laptop["cluster"], laptop["most nodes"], laptop["network measured"]) == ("laptop", "1",
                                                                                   "no interconnect check")
    assert laptop["accelerators per node"] == "none" and laptop["processor"].endswith(f"{os.cpu_count()} vCPUs")
