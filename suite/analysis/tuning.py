"""The studies `suite tune` writes (reports/tune/<tune_id>.json, beside the results folder): what each setting
gave, as the console's table and as the report's tuning page."""

import html
import json
from pathlib import Path


def tune_folder(results_dir: Path) -> Path:
    """Where a results folder's tuning studies and their presets go: tune/ beside it."""
    return Path(results_dir).parent / "tune"


def load_studies(results_dir: Path, warn=print) -> list[dict]:
    studies = []
    for path in sorted(tune_folder(results_dir).glob("*.json")):
        try:
            studies.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            warn(f"skipped tuning study {path}: {exc}")
    return studies


def settings_text(options: dict) -> str:
    """Settings as words: a flag by its name, others as name=value; the run as asked where there are none."""
    words = [name if value is True else f"no {name}" if value is False else f"{name}={value}"
             for name, value in options.items()]
    return ", ".join(words) or "the run as asked"


def rows(study: dict) -> list[tuple[str, str, str, str]]:
    """Each trial as (setting, throughput, × the run as asked, record or why not), the best marked."""
    best = (study.get("best") or {}).get("run_id")
    shown = []
    for trial in study["trials"]:
        if trial.get("throughput") is not None:
            ci = f" ± {trial['ci95']:,.1f}" if trial.get("ci95") is not None else ""
            speed = f"{trial['throughput']:,.1f}{ci} {trial.get('unit', '')}".strip()
        else:
            speed = trial["status"]
        ratio = f"{trial['vs_asked']:.2f}" if trial.get("vs_asked") is not None else "-"
        mark = " (best)" if best and trial.get("run_id") == best else ""
        mark = mark or (" (within noise)" if trial.get("within_noise") else "")
        where = trial.get("run_id") or ""
        if trial["status"] != "ok":
            where = f"{where}: {trial.get('reason') or trial['status']}".lstrip(": ")
        shown.append((trial["label"] + mark, speed, ratio, where))
    return shown


def study_lines(study: dict) -> list[str]:
    """The study as the console prints it: a heading, the table, the best settings and how to pass them back."""
    lines = [f"== tune {study['case']}: {len(study['trials'])} trial(s) in {study['seconds']:.0f} s of a "
             f"{study['budget_s'] / 60:g}-min budget ({study['stopped']})"]
    table = [("setting", "throughput", "x as asked", "record"), *rows(study)]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    lines += ["   " + "  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)).rstrip()
              for row in table]
    if any(trial.get("within_noise") for trial in study["trials"]):
        lines.append("   within noise: more than 2% faster than the best so far, but not beyond the two runs' 95% "
                     "intervals together: not kept (longer trials narrow the intervals)")
    if best := study.get("best"):
        lines.append(f"   best: {settings_text(best['options'])} ({best['vs_asked']} x the run as asked)")
        lines.append(f"   preset: {study['preset']} (ARGS=\"--preset tuned:{study['preset']}\")")
    else:
        lines.append("   no trial succeeded: no preset written")
    return lines


def report_body(results_dir: Path, warn=print) -> str:
    """The report's tuning page: one table per study, newest first."""
    studies = load_studies(results_dir, warn)
    if not studies:
        return "<p>No tuning studies yet: <code>make tune CASE=...</code> writes them.</p>"
    parts = []
    for study in reversed(studies):
        best = study.get("best")
        said = (f"best: {html.escape(settings_text(best['options']))}, "
                f"{best['vs_asked']} x the run as asked; preset <code>{html.escape(study['preset'])}</code>"
                if best else "no trial succeeded")
        cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows(study))
        parts.append(f"<h2>{html.escape(study['case'])}: {html.escape(study['tune_id'])}</h2>"
                     f"<p>{len(study['trials'])} trial(s) in {study['seconds']:.0f} s ({html.escape(study['stopped'])})"
                     f"; {said}</p><table><tr><th>setting</th><th>throughput</th><th>× as asked</th>"
                     f"<th>record</th></tr>{cells}</table>")
    return "".join(parts)
