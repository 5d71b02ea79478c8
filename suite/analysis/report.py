"""Records -> self-contained HTML pages (Plotly, its JavaScript embedded once per page) and a CSV.

reports/index.html        one row per case x stack x cluster, links to the case pages
reports/case-<case>.html  throughput (log y, in the case's unit: img/s, tokens/s), MFU, speedup,
                          efficiency (and epoch time) vs devices, with the case's published figures as
                          dashed series; one series per cluster, stack and configuration (what_ran.py:
                          model, size, batch, dtype, data, lock, parallel mode, compile, preset, ...);
                          each configuration's runs over time where it ran more than once
reports/frameworks.html   the same work in every framework (a table of the --same-work records, rows whose
                          configuration differs flagged), then all cases side by side: per-device
                          throughput and efficiency
reports/systems.html      what each cluster is (its nodes under MLPerf's system-description names, its network
                          as measured), a row per cluster
reports/site-check.html   the latest `suite check` of each cluster: which paths work, and why not
reports/summary.csv       the figures behind the plots
"""

import csv
import html
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from suite.analysis import site_check, systems, tuning, what_ran
from suite.analysis.same_work import parallel_table_html
from suite.analysis.scaling import exchange_for, fit, from_points
from suite.analysis.utilisation import is_valid, mfu_cell, reference_mfu
from suite.base.stats import speedup_efficiency
from suite.records.read import Point, case_references, case_spec, latest, load_points


@dataclass
class Series:
    """Records of one case on one cluster with one stack and one configuration (what_ran: the work and the
    settings that change its speed), latest per device count."""

    case: str
    cluster: str
    stack: str
    config_label: str
    points: list[Point]
    distinct: str = ""  # what tells this series from another of the same label (its data, its lock)
    settings: tuple = ()  # what_ran.settings_of its points

    @property
    def unit(self) -> str:
        return what_ran.unit_of(self.points[-1])

    @property
    def name(self) -> str:
        return f"{self.cluster} / {self.stack}"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.config_label}{self.distinct})"

    @property
    def baseline(self) -> Point:
        return self.points[0]

    def _against_baseline(self, point: Point) -> tuple[float, float]:
        [pair] = speedup_efficiency([(point.devices, point.throughput["mean"])],
                                    (self.baseline.devices, self.baseline.throughput["mean"]))
        return pair

    def speedup(self, point: Point) -> float:
        return self._against_baseline(point)[0]

    def efficiency(self, point: Point) -> float:
        return self._against_baseline(point)[1]


def build_series(points: list[Point]) -> list[Series]:
    """One series per case, cluster, stack, configuration and settings (parallel mode, compile, ...):
    records that differ in what they ran are never drawn as one line."""
    groups: dict[tuple, dict[int, Point]] = defaultdict(dict)
    newest = latest(points, lambda p: (p.case, p.cluster, p.stack, p.config_key, what_ran.precision(p),
                                       what_ran.settings_of(p), p.devices))
    for (*series_key, devices), p in newest.items():
        groups[tuple(series_key)][devices] = p
    series = []
    for (case, cluster, stack, _, _, settings), by_devices in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        ordered = [by_devices[d] for d in sorted(by_devices)]
        series.append(Series(case, cluster, stack, what_ran.configuration(ordered[0]), ordered, settings=settings))
    return distinguish(name_settings(series))


def name_settings(series: list[Series]) -> list[Series]:
    """Each series' label gets the settings that tell it from the case's other series, and any set."""
    by_case: dict[str, list[Series]] = defaultdict(list)
    for s in series:
        by_case[s.case].append(s)
    for group in by_case.values():
        differ = what_ran.varying([s.settings for s in group])
        for s in group:
            s.config_label = ", ".join([s.config_label, *what_ran.shown_settings(s.case, s.settings, differ)])
    return series


# config_key's fields, as a legend names them where they tell two series apart
KEY_FIELDS = ("model", "image size", "batch", "dtype", "data", "lock")


def distinguish(series: list[Series]) -> list[Series]:
    """Series of one case whose legend labels would be equal (they differ in a field the label does
    not show: the data, the stack's lock) get the fields that differ appended."""
    same: dict[tuple, list[Series]] = defaultdict(list)
    for s in series:
        same[(s.case, s.label)].append(s)
    for group in (g for g in same.values() if len(g) > 1):
        keys = [s.points[0].config_key for s in group]
        differ = [i for i in range(len(KEY_FIELDS)) if len({k[i] for k in keys}) > 1]
        for s, key in zip(group, keys):
            s.distinct = "".join(f", {KEY_FIELDS[i]} {_shown(KEY_FIELDS[i], key[i])}" for i in differ)
    return series


def _shown(field: str, value) -> str:
    """A field's value as a legend shows it: a lock by the start of its hash, anything else whole (two
    data paths may share their first characters)."""
    return str(value)[:12] if field == "lock" else str(value)


def _axes(fig: go.Figure, title: str, y_title: str, log_y: bool = False) -> go.Figure:
    """Layout of a plot over device counts: a log x axis ticked at the counts its series hold (and
    only there), and a log y axis where asked (throughput: a CPU's 20 img/s beside a GPU's 50,000)."""
    fig.update_layout(title=title, template="plotly_white", height=420, hovermode="closest",
                      legend={"orientation": "h", "y": -0.25}, margin={"t": 60, "b": 40})
    ticks = device_ticks(fig)
    fig.update_xaxes(title="devices", type="log", tickmode="array", tickvals=ticks, ticktext=[str(t) for t in ticks])
    if log_y:
        fig.update_yaxes(title=y_title, type="log")
    else:
        fig.update_yaxes(title=y_title, rangemode="tozero" if "efficiency" not in y_title else None)
    return fig


def device_ticks(fig: go.Figure) -> list[int]:
    """The device counts the figure's series are drawn at, each once."""
    return sorted({int(x) for trace in fig.data for x in (trace.x or ()) if x})


def _trace(series: Series, ys: list[float], errors: list[float | None] | None = None) -> go.Scatter:
    error_y = None
    if errors and any(e is not None for e in errors):
        error_y = {"type": "data", "array": [e or 0 for e in errors], "visible": True}
    return go.Scatter(x=[p.devices for p in series.points], y=ys, mode="lines+markers", error_y=error_y,
                      name=series.label, hovertext=[_hover(p) for p in series.points],
                      hoverinfo="x+y+text")


def _hover(point: Point) -> str:
    """The point's hover text, with its MFU where the record has one."""
    used = point.record["metrics"].get("utilisation")
    return what_ran.hover(point) + (f"<br>MFU {mfu_cell(used)}" if used else "")


def _reference_traces(case: str, key: str, transform=None, min_points: int = 1) -> list[go.Scatter]:
    """The case's published figures of `key` (transformed), those of at least `min_points` device counts."""
    traces = []
    for ref in case_references(case):
        if key not in ref or len(ref.get("devices", [])) < min_points:
            continue
        devices, values = ref["devices"], ref[key]
        ys = transform(devices, values) if transform else values
        label = f"published: {ref['source']}"
        mfu = reference_mfu(ref)
        texts = [f"{ref['source']}<br>{ref.get('hardware', '')}" + (f"<br>MFU {100 * m:.1f}%" if mfu else "")
                 for m in (mfu or [None] * len(devices))]
        traces.append(go.Scatter(x=devices, y=ys, mode="lines+markers", name=label,
                                 line={"dash": "dash"}, marker={"symbol": "x"}, hovertext=texts, hoverinfo="x+y+text"))
    return traces


def _model_traces(case: str, series: list[Series]) -> list[go.Scatter]:
    """The scaling model fitted to each series of 2+ device counts, drawn to 4x the largest."""
    spec = case_spec(case)
    traces = []
    for s in series:
        if "scaling" not in spec or len(s.points) < 2:
            continue
        data = from_points(s.points)
        try:
            model = fit(data.points, exchange_for(spec, data), data.batch_per_device)
        except ValueError:  # figures the model cannot describe: no line rather than a wrong one
            continue
        top = max(data.points)
        xs = sorted(set(data.points) | {2 * top, 4 * top})
        traces.append(go.Scatter(x=xs, y=[model.throughput(n) for n in xs], mode="lines", name=f"model: {s.label}",
                                 line={"dash": "dot"}, hovertext=[model.describe()] * len(xs), hoverinfo="x+y+text"))
    return traces


def _speedups(devices, values):
    return [s for s, _ in speedup_efficiency(zip(devices, values), (devices[0], values[0]))]


def _efficiencies(devices, values):
    return [e for _, e in speedup_efficiency(zip(devices, values), (devices[0], values[0]))]


def _y_scale_switch(fig: go.Figure) -> go.Figure:
    """Buttons above the plot that switch its y axis between linear and log scale (log at first)."""
    fig.update_layout(updatemenus=[{
        "type": "buttons", "direction": "right", "x": 1.0, "xanchor": "right", "y": 1.12, "yanchor": "bottom",
        "showactive": True, "active": 1,
        "buttons": [{"label": "linear", "method": "relayout", "args": [{"yaxis.type": "linear"}]},
                    {"label": "log", "method": "relayout", "args": [{"yaxis.type": "log"}]}]}])
    return fig


def one_count_sentence(series: list[Series]) -> str | None:
    """Where no series has two device counts, the sentence that stands in for speedup and efficiency."""
    if not series or any(len(s.points) > 1 for s in series):
        return None
    counts = sorted({p.devices for s in series for p in s.points})
    if len(counts) == 1:
        return ("Speedup and efficiency need runs at two or more device counts; these records have only "
                f"{counts[0]} device{'s' if counts[0] != 1 else ''}.")
    return ("Speedup and efficiency need runs of one configuration at two or more device counts; each "
            f"configuration here ran at one only ({', '.join(map(str, counts[:-1]))} or {counts[-1]} devices).")


def case_parts(case: str, series: list[Series]) -> list[go.Figure | str]:
    """The case page's plots in order, and where no series has two device counts, in the place of the
    speedup and efficiency plots, the sentence saying why there are none (the published figures' speedup
    drawn still where the case has some of two or more counts)."""
    figures = case_figures(case, series)
    sentence = one_count_sentence(series)
    if sentence is None:
        return figures
    at = next((i for i, f in enumerate(figures) if any(what in f.layout.title.text for what in
                                                       ("speedup", "time per epoch"))), len(figures))
    return [*figures[:at], f'<p class="note">{html.escape(sentence)}</p>', *figures[at:]]


def case_figures(case: str, series: list[Series]) -> list[go.Figure]:
    """Throughput, MFU (where records have it), speedup and efficiency (where a series or a published
    figure has two device counts), epoch time (epoch-based cases)."""
    unit = what_ran.units_label(s.unit for s in series)
    throughput = go.Figure([_trace(s, [p.throughput["mean"] for p in s.points],
                                   [p.throughput["ci95"] for p in s.points])
                            for s in series] + _reference_traces(case, "throughput") + _model_traces(case, series))
    scaling = [s for s in series if len(s.points) > 1]  # one point has no speedup to show
    speedup = go.Figure([_trace(s, [s.speedup(p) for p in s.points]) for s in scaling]
                        + _reference_traces(case, "throughput", _speedups, min_points=2))
    devices = device_ticks(speedup)
    if devices:
        speedup.add_trace(go.Scatter(x=devices, y=[d / devices[0] for d in devices], mode="lines", name="ideal",
                                     line={"dash": "dot", "color": "grey"}))
    efficiency = go.Figure([_trace(s, [s.efficiency(p) for p in s.points]) for s in scaling]
                           + _reference_traces(case, "throughput", _efficiencies, min_points=2))
    figures = [_y_scale_switch(_axes(throughput, f"{case}: throughput (mean ± 95% CI)", f"{unit}, all devices",
                                     log_y=True))]
    if any(p.record["metrics"].get("utilisation") for s in series for p in s.points):
        figures.append(mfu_figure(case, series))
    if speedup.data:  # nothing at two device counts: no empty axes (case_parts says why)
        figures += [_axes(speedup, f"{case}: speedup over the smallest device count", "speedup"),
                    _axes(efficiency, f"{case}: parallel efficiency", "efficiency %")]
    if (any(p.epoch_seconds for s in series for p in s.points)
            or any("epoch_seconds" in r for r in case_references(case))):
        epochs = go.Figure([_trace(s, [p.epoch_seconds for p in s.points]) for s in series]
                           + _reference_traces(case, "epoch_seconds"))
        figures.append(_axes(epochs, f"{case}: time per epoch (first epoch excluded)", "seconds"))
    return figures


LOCK_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "pentagon")


def history_key(point: Point) -> tuple:
    """What a configuration's runs share over time: its series' key but for the stack lock (an upgraded stack,
    driver or checkout is what a history shows), and the device count."""
    return (point.cluster, point.stack, point.config_key[:-1], what_ran.precision(point), what_ran.settings_of(point),
            point.devices)


def history_figure(case: str, points: list[Point], series: list[Series]) -> go.Figure | None:
    """Throughput of each configuration and device count over the dates its records finished, every record
    of it (the other plots hold the latest alone); a marker's shape changes where the stack lock does. None
    where no configuration of the case has run twice."""
    runs: dict[tuple, list[Point]] = defaultdict(list)
    for point in sorted((p for p in points if p.case == case), key=lambda p: p.finished_at):
        runs[history_key(point)].append(point)
    label_of = {id(p): f"{s.name} ({s.config_label})" for s in series for p in s.points}  # not its lock: it changes
    traces = []
    for key, ran in sorted(runs.items(), key=lambda kv: (kv[0][:2], kv[0][-1])):
        if len(ran) < 2:
            continue
        locks = list(dict.fromkeys(p.record["provenance"].get("stack_lock_sha256") for p in ran))
        traces.append(go.Scatter(
            x=[p.finished_at.replace("T", " ").removesuffix("Z") for p in ran], y=[p.throughput["mean"] for p in ran],
            error_y={"type": "data", "array": [p.throughput.get("ci95") or 0 for p in ran], "visible": True},
            mode="lines+markers", name=f"{label_of.get(id(ran[-1]), ran[-1].cluster)}, {key[-1]} device(s)",
            marker={"symbol": [LOCK_SYMBOLS[locks.index(p.record["provenance"].get("stack_lock_sha256"))
                                            % len(LOCK_SYMBOLS)] for p in ran], "size": 9},
            hovertext=[_hover(p) for p in ran], hoverinfo="x+y+text"))
    if not traces:
        return None
    fig = go.Figure(traces)
    unit = what_ran.units_label(what_ran.unit_of(p) for p in points if p.case == case)
    fig.update_layout(title=f"{case}: throughput over time, each run (a new marker shape: a new stack lock)",
                      template="plotly_white", height=420, hovermode="closest", legend={"orientation": "h", "y": -0.3},
                      margin={"t": 60, "b": 40})
    fig.update_xaxes(title="finished (UTC)", type="date")
    fig.update_yaxes(title=f"{unit}, all devices", rangemode="tozero")
    return fig


def mfu_figure(case: str, series: list[Series]) -> go.Figure:
    """Model FLOPs utilisation per device count: against the datasheet peak (solid) and the measured
    matmul peak (dotted) of each series (never a record whose utilisation is invalid: an MFU above 1),
    and the published figures whose FLOPs are known."""
    traces = []
    for s in series:
        for key, against, dash in (("mfu_datasheet", "datasheet", None), ("mfu_measured", "measured matmul", "dot")):
            points = [p for p in s.points if is_valid(used := p.record["metrics"].get("utilisation")) and used.get(key)]
            if points:
                traces.append(go.Scatter(x=[p.devices for p in points], mode="lines+markers", line={"dash": dash},
                                         y=[100 * p.record["metrics"]["utilisation"][key] for p in points],
                                         name=f"{s.label} vs {against}", hovertext=[_hover(p) for p in points],
                                         hoverinfo="x+y+text"))
    for ref in case_references(case):
        if mfu := reference_mfu(ref):
            traces.append(go.Scatter(x=ref["devices"], y=[100 * m for m in mfu], mode="lines+markers",
                                     name=f"published: {ref['source']}", line={"dash": "dash"}, marker={"symbol": "x"},
                                     hovertext=[f"{ref['source']}<br>{ref.get('hardware', '')}"] * len(mfu),
                                     hoverinfo="x+y+text"))
    return _axes(go.Figure(traces), f"{case}: model FLOPs utilisation (MFU)", "MFU %, of the peak named")


def frameworks_figures(series: list[Series]) -> list[go.Figure]:
    """Per-device throughput of every series (each case in its own unit, named where they differ), and
    the parallel efficiency of those of two or more device counts (none: no plot)."""
    units = {s.unit for s in series}

    def per_device(s):
        trace = _trace(s, [p.throughput["per_device"] for p in s.points])
        trace.name = f"{s.case}{f' ({s.unit})' if len(units) > 1 else ''}: {trace.name}"
        return trace

    def efficiency(s):
        trace = _trace(s, [s.efficiency(p) for p in s.points])
        trace.name = f"{s.case}: {trace.name}"
        return trace

    scaling = [s for s in series if len(s.points) > 1]
    y_title = (f"{what_ran.units_label(units)} per device" if len(units) == 1 else
               f"per device, each case in its unit ({what_ran.units_label(units)})")
    figures = [_y_scale_switch(_axes(go.Figure([per_device(s) for s in series]), "per-device throughput, all cases",
                                     y_title, log_y=True))]
    if scaling:
        figures.append(_axes(go.Figure([efficiency(s) for s in scaling]), "parallel efficiency, all cases",
                             "efficiency %"))
    return figures


def same_work_table(points: list[Point]) -> str:
    """The `--same-work` records (suite/analysis/same_work.py) as one table, rows whose configuration differs
    from the most common one flagged: shown first on the frameworks page."""
    from suite.analysis.same_work import COLUMNS, build_rows, cells, summary

    rows = build_rows(points)
    if not rows:
        return ("<h2>The same work in every framework</h2><p>No <code>--same-work</code> records yet "
                "(<code>make compare-frameworks</code>).</p>")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in (*COLUMNS, "configuration"))
    flagged = ' style="background:#fde"'
    body = "".join(
        f"<tr{flagged if r.differs else ''}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells(r))
        + f"<td>{html.escape('DIFFERS: ' + r.differs if r.differs else 'same')}</td></tr>" for r in rows)
    return (f"<h2>The same work in every framework</h2><p>{html.escape(summary(rows))}</p>"
            f"<table><tr>{head}</tr>{body}</table>")


def joules_per_image(point: Point) -> float | None:
    """Energy per sample (image, token: what the throughput counts) over the timed window (GPUs and CPU
    packages where measured), else None."""
    return (point.record["metrics"].get("telemetry") or {}).get("joules_per_image")


EMPTY_CELL = "<td>-</td>"  # an index cell without a figure (index_table leaves out a column of only these)


def bound_cell(point: Point) -> str:
    """The index's cell: the verdict in a word, the sentence behind it as the cell's tooltip."""
    diagnosis = point.record["metrics"].get("diagnosis")
    if not diagnosis:
        return EMPTY_CELL
    return f'<td title="{html.escape(diagnosis["why"])}">{html.escape(diagnosis["verdict"])}</td>'


def published_cell(point: Point) -> str:
    """The index's cell: this run's throughput per device over the published figure's, the GPU and precision
    that figure is for and its MFU; its source as the cell's tooltip."""
    found = point.record["metrics"].get("published")
    if not found:
        return EMPTY_CELL
    text = " ".join(filter(None, [f"{found['ratio']:.2f}x", found.get("gpu"), found.get("precision")]))
    if found.get("published_mfu") is not None:
        text += f" (theirs: MFU {100 * found['published_mfu']:.0f}%)"
    return f'<td class="words" title="{html.escape(found["source"])}">{html.escape(text)}</td>'


def _joules_cell(point: Point, named: bool = False) -> str:
    """Energy per sample; `named`: with its unit (J/img, J/token), where the heading names none."""
    value = joules_per_image(point)
    if value is None:
        return "-"
    return f"{value:.3g}" + (f" J/{what_ran.sample_word(what_ran.unit_of(point))}" if named else "")


def telemetry_figures(series: list[Series]) -> list[go.Figure]:
    """Utilisation and power over time of the latest run of each series (its largest device count)."""
    return [f for f in (telemetry_figure(s.points[-1]) for s in series) if f is not None]


def telemetry_figure(point: Point) -> go.Figure | None:
    hosts = {host: facts["series"] for host, facts in
             ((point.full_record()["metrics"].get("telemetry") or {}).get("hosts") or {}).items()
             if isinstance(facts, dict) and facts.get("series")}
    if not hosts:
        return None
    fig = go.Figure()
    for host, s in hosts.items():
        for key, label, axis in (("cpu_util_pct", "CPU %", "y"), ("gpu_util_pct", "GPU %", "y"),
                                 ("gpu_power_w", "GPU power W", "y2"),
                                 ("cpu_package_power_w", "CPU package power W", "y2")):
            if key in s:
                fig.add_trace(go.Scatter(x=s["t"], y=s[key], mode="lines", name=f"{host}: {label}", yaxis=axis,
                                         line={"dash": "dot"} if axis == "y2" else None))
    start, end = next(iter(hosts.values()))["window_s"]
    fig.add_vrect(x0=start, x1=end, fillcolor="green", opacity=0.08, line_width=0, annotation_text="timed window")
    fig.update_layout(title=f"{point.record['run_id']}: utilisation and power over time", template="plotly_white",
                      height=380, legend={"orientation": "h", "y": -0.25}, margin={"t": 60, "b": 40},
                      xaxis={"title": "seconds from the start of the timed window"},
                      yaxis={"title": "utilisation %", "range": [0, 105]},
                      yaxis2={"title": "power W", "overlaying": "y", "side": "right", "rangemode": "tozero"})
    return fig


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} h1,p,.plot{{max-width:1200px}} .plot{{margin-bottom:2em}}
table{{border-collapse:collapse;font-size:0.85em;display:block;overflow-x:auto;max-width:100%}}
td,th{{border:1px solid #ccc;padding:3px 5px;text-align:left;vertical-align:top}} .index td{{white-space:nowrap}}
.index td.words{{white-space:normal;min-width:7em}} .index td.config{{min-width:14em;max-width:24em}}
.index td:first-child,.index th:first-child{{position:sticky;left:0;background:#fff;
box-shadow:inset -1px 0 #ccc}}</style>
{plotly}</head>
<body><h1>{title}</h1>{body}</body></html>
"""


def _page(title: str, body: str, parts: list[go.Figure | str]) -> str:
    """A page of `body`, then `parts`: plots, and HTML (a sentence in the place of a plot) as it is."""
    plots = "".join(f if isinstance(f, str) else
                    f'<div class="plot">{f.to_html(full_html=False, include_plotlyjs=False)}</div>' for f in parts)
    script = f"<script>{get_plotlyjs()}</script>" if any(not isinstance(f, str) for f in parts) else ""
    return PAGE.format(title=html.escape(title), plotly=script, body=body + plots)


def index_heads(units: set[str]) -> tuple[str, str, str]:
    """The index's throughput, per-device and energy headings: in the unit where all rows share one
    (img/s, img/s per device, J/img), else plain, each cell then naming its unit."""
    if len(units) == 1:
        [unit] = units
        return unit, f"{unit} per device", f"J/{what_ran.sample_word(unit)}"
    return "throughput", "throughput per device", "energy per sample"


OPTIONAL_COLUMNS = ("efficiency", "bound", "MFU", "vs published")  # and energy: left out where no row has a figure


def text_cell(text: str, css: str = "") -> str:
    """A cell of plain text; EMPTY_CELL for '-' (no figure)."""
    if text == "-":
        return EMPTY_CELL
    return f'<td class="{css}">{html.escape(text)}</td>' if css else f"<td>{html.escape(text)}</td>"


def index_row(s: Series, units: set[str]) -> dict[str, str]:
    """One row of the index, heading by heading (index_heads' own included): each cell's HTML."""
    top, tp = s.points[-1], s.points[-1].throughput
    ci = f" ± {tp['ci95']:.1f}" if tp["ci95"] is not None else ""
    unit = "" if len(units) == 1 else f" {html.escape(s.unit)}"  # the heading names a unit all share
    throughput, per_device, energy = index_heads(units)
    return {
        "case": f'<td><a href="case-{html.escape(s.case)}.html">{html.escape(s.case)}</a></td>',
        "stack": f"<td>{html.escape(s.stack)}</td>", "cluster": f"<td>{html.escape(s.cluster)}</td>",
        "configuration": f'<td class="words config">{html.escape(s.config_label)}</td>',
        "devices": f"<td>{devices_cell(s)}</td>",
        throughput: f"<td>{tp['mean']:.1f}{ci}{unit}</td>", per_device: f"<td>{tp['per_device']:.1f}{unit}</td>",
        energy: text_cell(_joules_cell(top, named=len(units) > 1)),
        "efficiency": f"<td>{s.efficiency(top):.0f}%</td>" if len(s.points) > 1 else EMPTY_CELL,
        "bound": bound_cell(top),
        "MFU": text_cell(mfu_cell(top.record["metrics"].get("utilisation")), css="words"),
        "vs published": published_cell(top), "latest": date_cell(top.finished_at)}


def index_table(series: list[Series], units: set[str]) -> str:
    """The index's table: a row per series; the energy column and OPTIONAL_COLUMNS only where a row fills them."""
    rows = [index_row(s, units) for s in series]
    if not rows:
        return ""
    optional = {*OPTIONAL_COLUMNS, index_heads(units)[2]}
    shown = [h for h in rows[0] if h not in optional or any(row[h] != EMPTY_CELL for row in rows)]
    return ('<table class="index"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in shown) + "</tr>"
            + "".join("<tr>" + "".join(row[h] for h in shown) + "</tr>" for row in rows) + "</table>")


def _index_body(series: list[Series], points: list[Point], skipped: int) -> str:
    dates = sorted(p.finished_at for p in points)
    span = f"{dates[0]} to {dates[-1]}" if dates else "no records"
    units = {s.unit for s in series} or {what_ran.DEFAULT_UNIT}
    return (f"<p>{len(points)} records used ({span}); {skipped} file(s) skipped. "
            f"<a href=\"frameworks.html\">All cases side by side</a> · <a href=\"systems.html\">Systems</a> · "
            f"<a href=\"site-check.html\">Site checks</a> · "
            f"<a href=\"tuning.html\">Tuning</a> · "
            f"<a href=\"summary.csv\">CSV</a></p>"
            "<p>A row is a configuration on a cluster at the device counts measured; its figures are those of the "
            "most devices (in bold), its efficiency against the fewest. A column no row has a figure for is left "
            "out.</p>" + index_table(series, units))


CSV_COLUMNS = ["case", "stack", "cluster", "devices", "nodes", "throughput", "unit", "ci95", "per_device", "speedup",
               "efficiency_pct", "epoch_seconds", "model", "image_size", "batch_per_device", "dtype",
               *(s.name.replace(" ", "_").replace("-", "_") for s in what_ran.SETTINGS), "run_id",
               "finished_at", "joules_per_image", "bound", "published_ratio", "flops_per_sample",
               "achieved_flops_per_s", "mfu_datasheet", "mfu_measured"]


def devices_cell(series: Series) -> str:
    """The device counts measured, the one the row's figures come from (the most) in bold."""
    counts = [str(p.devices) for p in series.points]
    return ", ".join([*counts[:-1], f"<b>{counts[-1]}</b>"])


def date_cell(finished_at: str) -> str:
    """The day and minute (UTC) a record finished, the whole timestamp as the cell's tooltip."""
    shown = finished_at[:16].replace("T", " ") if finished_at[10:11] == "T" else finished_at
    return f'<td title="{html.escape(finished_at)}">{html.escape(shown)}</td>'


def _csv_rows(series: list[Series]):
    for s in series:
        for p in s.points:
            cfg, used = p.record["config"], p.record["metrics"].get("utilisation") or {}
            scales = len(s.points) > 1  # one device count: no speedup or efficiency to state
            yield [s.case, s.stack, s.cluster, p.devices, p.nodes, p.throughput["mean"], what_ran.unit_of(p),
                   p.throughput["ci95"], p.throughput["per_device"], s.speedup(p) if scales else None,
                   s.efficiency(p) if scales else None, p.epoch_seconds, cfg.get("model"), cfg.get("image_size"),
                   cfg.get("batch_per_device"), cfg.get("dtype"), *s.settings, p.record["run_id"], p.finished_at,
                   joules_per_image(p), (p.record["metrics"].get("diagnosis") or {}).get("verdict"),
                   (p.record["metrics"].get("published") or {}).get("ratio"),
                   used.get("flops_per_sample"), used.get("achieved_flops_per_s"),
                   *(used.get(k) if is_valid(used) else None for k in ("mfu_datasheet", "mfu_measured"))]


def write_report(results_dir: Path, out_dir: Path, warn=print) -> list[Path]:
    warnings: list[str] = []

    def collect(message):
        warnings.append(message)
        warn(message)

    points = load_points(results_dir, collect)
    series = build_series(points)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    cases = sorted({s.case for s in series})
    for case in cases:
        case_series = [s for s in series if s.case == case]
        body = '<p><a href="index.html">all cases</a></p>'
        history = history_figure(case, points, case_series)
        written.append(_write(out_dir / f"case-{case}.html", _page(f"{case}", body, case_parts(case, case_series)
                                                                    + ([history] if history else [])
                                                                    + telemetry_figures(case_series))))
    sentence = one_count_sentence(series) if series else None
    written.append(_write(out_dir / "frameworks.html",
                          _page("All cases side by side",
                                '<p><a href="index.html">index</a></p>' + same_work_table(points)
                                + parallel_table_html(points),
                                frameworks_figures(series)
                                + ([f'<p class="note">{html.escape(sentence)}</p>'] if sentence else []))))
    written.append(_write(out_dir / "site-check.html", _page("Site checks", '<p><a href="index.html">index</a></p>'
                                                             + site_check.report_body(results_dir, warn), [])))
    written.append(_write(out_dir / "tuning.html", _page("Tuning studies", '<p><a href="index.html">index</a></p>'
                                                         + tuning.report_body(results_dir, warn), [])))
    written.append(_write(out_dir / "systems.html", _page("Systems", '<p><a href="index.html">index</a></p>'
                                                          + systems.report_body(points), [])))
    written.append(_write(out_dir / "index.html",
                          _page("Benchmark results", _index_body(series, points, len(warnings)), [])))
    csv_path = out_dir / "summary.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(_csv_rows(series))
    written.append(csv_path)
    return written


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
