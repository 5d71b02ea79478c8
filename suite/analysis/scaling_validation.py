"""The scaling model checked against published figures it was not fitted to: the case's measurements
(its records, or a published table), extrapolation to held-out device counts and leave-one-out, as the
markdown tables of docs/scaling.md (written by tools/scaling_validation.py)."""

from collections import Counter
from dataclasses import dataclass

from suite.analysis.scaling import Measurements, Model, exchange_for, fit, from_points, from_reference
from suite.base.errors import UsageError
from suite.base.stats import fmt_number, speedup_efficiency
from suite.inputs.cases import load_case
from suite.records.read import case_references, load_points


def measurements(case, cluster: str | None, results_dir, published: str | None) -> Measurements:
    """The published figures whose source contains `published`, else the successful records of the case (on
    the cluster), of its commonest configuration."""
    if published is not None:
        refs = [r for r in case_references(case.name) if "throughput" in r and published.lower() in r["source"].lower()]
        if not refs:
            raise UsageError(f"case {case.name} has no published throughput figures matching '{published}'")
        return from_reference(refs[0])
    points = [p for p in load_points(results_dir, warn=lambda m: None)
              if p.case == case.name and (cluster is None or p.cluster == cluster)]
    if not points:
        raise UsageError(f"no successful records of {case.name}{f' on {cluster}' if cluster else ''} in {results_dir}")
    commonest = Counter(p.config_key for p in points).most_common(1)[0][0]
    return from_points([p for p in points if p.config_key == commonest])


@dataclass(frozen=True)
class Validation:
    """The model checked against published figures it was not fitted to, two ways:
    extrapolation  fitted on the device counts <= fit_up_to, predicting the larger ones (held out);
    leave-one-out  each device count predicted by a model fitted on all the other ones."""

    case: str
    data: Measurements
    fit_up_to: int
    model: Model                      # the extrapolation fit
    leave_one_out: dict[int, Model]   # devices -> the model fitted without that device count

    @property
    def held_out(self) -> list[int]:
        return sorted(n for n in self.data.points if n > self.fit_up_to)

    def error_pct(self, n: int) -> float:
        """Of the extrapolation model at n: a prediction error where n is held out, else the fit's residual."""
        return 100 * (self.model.throughput(n) - self.data.points[n]) / self.data.points[n]

    def loo_error_pct(self, n: int) -> float:
        return 100 * (self.leave_one_out[n].throughput(n) - self.data.points[n]) / self.data.points[n]


def validate_on_published(case_name: str, published: str, fit_up_to: int) -> Validation:
    case = load_case(case_name)
    data = measurements(case, None, None, published)
    if not any(n > fit_up_to for n in data.points):
        raise ValueError(f"{case_name}: no published point above {fit_up_to} devices to hold out")
    exchange = exchange_for(case.spec, data)
    model = fit({n: v for n, v in data.points.items() if n <= fit_up_to}, exchange, data.batch_per_device)
    others = {n: fit({m: v for m, v in data.points.items() if m != n}, exchange, data.batch_per_device)
              for n in data.points if len(data.points) > 4}  # 3 parameters: fitted on 4 points or more
    return Validation(case_name, data, fit_up_to, model, others)


def validation_table(case_name: str, published: str, fit_up_to: int) -> str:
    """Markdown: the model fitted on published figures up to `fit_up_to` devices, predicting the rest,
    and each point predicted by a fit on all the others (docs/scaling.md)."""
    v = validate_on_published(case_name, published, fit_up_to)
    points = sorted(v.data.points.items())

    def pct(value: float) -> str:
        return f"{fmt_number(value, 1, sign=True)}%"

    published_eff = {n: e for (n, _), (_, e) in zip(points, speedup_efficiency(points, points[0]))}
    rows = [f"{case_name}, {v.data.source}; extrapolation held out devices {', '.join(map(str, v.held_out))}, "
            f"model: {v.model.describe()}", "",
            f"| devices | published img/s | role (fit on <= {fit_up_to}) | predicted img/s "
            "| error (residual if fitted) | leave-one-out predicted img/s | leave-one-out error | published efficiency "
            "| predicted efficiency |",
            "| ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, value in points:
        held = n > fit_up_to
        error = pct(v.error_pct(n)) if held else f"({pct(v.error_pct(n))})"
        loo = (f"{fmt_number(v.leave_one_out[n].throughput(n), 0)} | {pct(v.loo_error_pct(n))}"
               if n in v.leave_one_out else "- | -")
        rows.append(f"| {n} | {fmt_number(value, 0)} | {'held out' if held else 'fitted'} "
                    f"| {fmt_number(v.model.throughput(n), 0)} | {error} | {loo} "
                    f"| {fmt_number(published_eff[n])}% | {fmt_number(100 * v.model.efficiency(n))}% |")
    return "\n".join(rows)
