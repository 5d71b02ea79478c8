"""What a record ran, in the words a report shows: the unit its throughput counts (img/s, tokens/s), its
configuration (model, image size where it has one, batch, dtype) and the settings that change the work
or the speed (parallel mode, compile and its mode, preset, optimizer implementation, ...). A setting a
record does not hold (records older than the option) reads as the case's default, so old and new records
of one configuration stay one series."""

import json
from dataclasses import dataclass

from suite.records.read import DEFAULT_UNIT, Point, case_spec, case_unit


def unit_of(point: Point) -> str:
    """What the point's throughput counts per second: the record's own unit, else its case's."""
    return point.throughput.get("unit") or case_unit(point.case)


def sample_word(unit: str) -> str:
    """What one sample of a unit is, for per-sample figures: img/s -> img, tokens/s -> token."""
    return {"img/s": "img", "tokens/s": "token"}.get(unit, unit.removesuffix("/s"))


def units_label(units) -> str:
    """One unit, or several joined (records of one case in different units: they say so)."""
    return " or ".join(sorted(set(units))) or DEFAULT_UNIT


@dataclass(frozen=True)
class Setting:
    """A setting that changes the work or the speed: where records say it (config.reported_by_case keys,
    then config.options keys), and how a legend shows a value of it."""

    name: str
    reported: tuple[str, ...]
    options: tuple[str, ...]
    unset: str = ""  # how a legend says the setting is off or not set: "no <name>" unless given

    def value(self, point: Point):
        """The record's value; absent, the case's default for the option (a flag: False), else None."""
        config = point.record["config"]
        reported, options = config.get("reported_by_case") or {}, config.get("options") or {}
        for key in self.reported:
            if key in reported:
                return _hashable(reported[key])
        for key in self.options:
            if key in options:
                return _hashable(options[key])
        return self.default(point.case)

    def default(self, case: str):
        """The case's default for the setting (case.toml's [options]; a flag: False), None where it has none."""
        declared = case_spec(case).get("options", {})
        for key in self.options:
            if key in declared:
                spec = declared[key]
                return _hashable(spec.get("default", False if spec.get("type") == "flag" else None))
        return None

    def shown(self, value) -> str:
        if value is True:
            return self.name
        if value in (False, None):
            return self.unset or f"no {self.name}"
        return f"{self.name} {value}"


class Parallel(Setting):
    def shown(self, value) -> str:
        return str(value) if value is not None else "parallel mode not recorded"


class Compile(Setting):
    """torch.compile (or another compiler), with its mode where the record names one: not compiled is
    False; compiled, the mode (a string) or True; None for a case without the choice (jax-gpt's step is
    always compiled, tf-cifar has no such option)."""

    MODE = Setting("compile mode", ("compile_mode",), ("compile-mode",))

    def value(self, point: Point):
        compiled = super().value(point)
        if not compiled:
            return compiled
        if isinstance(compiled, str):  # a case that records its mode as the value itself
            return compiled
        return self.MODE.value(point) or True

    def shown(self, value) -> str:
        if value is False or value is None:
            return "not compiled"
        return "compiled" if value is True else f"compiled (mode {value})"


class Context(Setting):
    def shown(self, value) -> str:
        return f"context {value} tokens"


# The settings that make records separate series, in the order a legend names them.
SETTINGS = (
    Parallel("parallel", ("parallel",), ("parallel",)),
    Compile("compile", ("compile",), ("compile",)),
    Setting("preset", ("preset",), ("preset",)),
    Setting("optimizer", ("optimizer_impl",), ("optimizer-impl",), "default optimizer"),
    Context("context", ("context",), ("context",)),
    Setting("activation checkpointing", ("activation_checkpointing",), ("activation-checkpointing",)),
    Setting("channels-last", ("channels_last",), ("channels-last",)),
)


def settings_of(point: Point) -> tuple:
    """The value of each of SETTINGS for the record: part of what must be equal within one series."""
    return tuple(s.value(point) for s in SETTINGS)


def precision(point: Point):
    """The dtype the case reported (amp-bfloat16, float32, ...), else the option that set it."""
    config = point.record["config"]
    if config.get("dtype"):
        return config["dtype"]
    options = config.get("options") or {}
    for key in ("precision", "dtype"):
        if options.get(key):
            return options[key]
    if "amp" in options:
        return "amp" if options["amp"] else "float32"
    return None


def configuration(point: Point) -> str:
    """Model, image size (image cases only), batch per device and dtype, as a legend starts."""
    config = point.record["config"]
    parts = [str(config.get("model") or point.case)]
    if config.get("image_size"):
        parts.append(f"{config['image_size']} px")
    if config.get("batch_per_device") is not None:
        parts.append(f"batch {config['batch_per_device']}/device")
    if (dtype := precision(point)) is not None:
        parts.append(str(dtype))
    return ", ".join(parts)


def shown_settings(case: str, values: tuple, varying: set[int]) -> list[str]:
    """The settings a legend names: those that differ between the case's series (`varying`: their
    indices in SETTINGS) and any other whose value is not the case's default (fsdp, compiled, a preset)."""
    return [s.shown(v) for i, (s, v) in enumerate(zip(SETTINGS, values))
            if i in varying or (v not in (None, False) and v != s.default(case))]


def all_settings(values: tuple) -> list[str]:
    """Every setting the record holds a value of, as words: for its hover."""
    return [s.shown(v) for s, v in zip(SETTINGS, values) if v is not None]


def varying(all_values: list[tuple]) -> set[int]:
    """The indices of the SETTINGS whose values differ among `all_values` (one tuple per series)."""
    return {i for i in range(len(SETTINGS)) if len({values[i] for values in all_values}) > 1}


def hover(point: Point) -> str:
    """A point's hover text: its run, date, hosts, configuration and every setting, throughput in its
    unit, stack and image."""
    prov = point.record["provenance"]
    lock = (prov.get("stack_lock_sha256") or "")[:12]
    image = prov.get("image_sha256") or prov.get("image") or "local stack"
    settings = ", ".join(all_settings(settings_of(point)))
    return (f"run {point.record['run_id']}<br>{point.finished_at}<br>hosts {', '.join(point.record['world']['hosts'])}"
            f"<br>{configuration(point)}" + (f"<br>{settings}" if settings else "")
            + f"<br>{point.throughput['mean']:,.1f} {unit_of(point)}<br>stack {point.stack} lock {lock}"
            f"<br>image {image}")


def _hashable(value):
    """A value usable in a series key: dicts and lists as their JSON."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
