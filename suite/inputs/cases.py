"""Use cases: one folder each under cases/, described by its case.toml."""

from dataclasses import dataclass, field
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.inputs.data_formats import format_problem
from suite.instack.case_options import (
    OptionError,
    RuleError,
    check_rules,
    evaluate,
    load_case_toml,
    option_args,
    parse_options,
)


@dataclass(frozen=True)
class Case:
    name: str
    dir: Path
    spec: dict = field(repr=False)

    @property
    def stack(self) -> str:
        return self.spec["stack"]

    @property
    def launcher(self) -> str:
        return self.spec["launcher"]

    def launcher_name(self, options: dict) -> str:
        """The launcher module: the case's, or the value of the option that `launcher_option` names."""
        chosen = self.spec.get("launcher_option")
        return (options.get(chosen) if chosen else None) or self.launcher

    @property
    def script(self) -> Path:
        return self.dir / self.spec["script"]

    @property
    def timeout_s(self) -> float:
        return 60.0 * self.spec.get("timeout_minutes", 60)

    @property
    def stall_s(self) -> float:
        """Silence (no output line from any process) after which a launch counts as hung."""
        return 60.0 * self.spec.get("stall_minutes", 30)

    @property
    def throughput_unit(self) -> str:
        """What the case's throughput counts per second: img/s, or the `unit` its case.toml names (tokens/s)."""
        return f"{self.spec['unit']}/s" if "unit" in self.spec else "img/s"

    @property
    def record_spec(self) -> dict:
        return self.spec.get("record", {})

    @property
    def data_script(self) -> Path | None:
        script = self.spec.get("data", {}).get("script")
        return self.dir / script if script else None

    @property
    def make_data_commands(self) -> str:
        """The two commands that make the case's data, in words: both whole, so that SYNTHETIC=1 is not
        taken for an option of the run; SRC where the data script needs a source ([data] source says what)."""
        source = self.spec.get("data", {}).get("source")
        real = f"make data CASE={self.name}" + (f" SRC={source}" if source else "")
        return f"'{real}', or 'make data CASE={self.name} SYNTHETIC=1' for a small generated set"

    def check_data(self, options: dict, data_dir: Path) -> None:
        """Refuse to launch when the files the case reads are not there (before any process starts)."""
        data = self.spec.get("data", {})
        if data.get("unless_option") and options.get(data["unless_option"]):
            return
        if "when" in data and not evaluate(data["when"], {k.replace("-", "_"): v for k, v in options.items()}):
            return  # data only for some options, e.g. when = "data == 'imagefolder'"
        missing = [rel for rel in data.get("requires", []) if not (data_dir / rel).exists()]
        if missing:
            raise UsageError(
                f"case {self.name}: data missing under {data_dir}: {missing[0]}"
                f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''} "
                f"(run {self.make_data_commands}; DATA_DIR says where data lives)")
        for rel, signature in data.get("signatures", {}).items():
            with open(data_dir / rel, "rb") as f:
                start = f.read(len(signature) // 2).hex()
            if start != signature:
                raise UsageError(f"case {self.name}: {data_dir / rel} is not in the expected format (starts with "
                                 f"'{start}', expected '{signature}'); prepare it with {self.make_data_commands}")
        self.check_formats(options, data_dir)

    def check_formats(self, options: dict, data_dir: Path) -> None:
        """The [data] formats table (path -> format, suite/inputs/data_formats.py), each bound its check takes
        (`format_limits`: keyword -> option, e.g. vocab = "vocab-size") read from the options."""
        data = self.spec.get("data", {})
        limits = {key: options.get(option) for key, option in data.get("format_limits", {}).items()}
        for rel, kind in data.get("formats", {}).items():
            if problem := format_problem(kind, data_dir / rel, **limits):
                raise UsageError(f"case {self.name}: {data_dir / rel} {problem}; prepare it with "
                                 f"'make data CASE={self.name}'")

    def check_requirements(self, stack_env, where: str) -> None:
        """The case's [requires] table (package -> version specifier, e.g. torch = ">=2.0") against the
        packages of the prepared stack; the first one missing or too old is refused in one line."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        for package, spec in self.spec.get("requires", {}).items():
            found = stack_env.version(package)
            if found is None:
                raise UsageError(f"case {self.name} needs {package}{spec}; the stack ({where}) has no {package}")
            try:
                ok = Version(found) in SpecifierSet(spec, prereleases=True)
            except InvalidVersion:
                continue  # a site build with a version pip cannot read: let the case try
            if not ok:
                raise UsageError(f"case {self.name} needs {package}{spec}; the stack ({where}) has {package} {found}")

    def host_needs(self, options: dict) -> list[tuple[tuple[str, ...], str]]:
        """The entries of the case's [[host_needs]] that its options ask for, as (needs, why): what those options
        need of a host beyond the stack (suite/stacks/build_needs.py's names), e.g. torch.compile's compilers."""
        values = {k.replace("-", "_"): v for k, v in options.items()}
        return [(tuple(entry["needs"]), entry["why"]) for entry in self.spec.get("host_needs", [])
                if evaluate(entry.get("when", "True"), values)]

    def tiny_args(self, **overrides) -> list[str]:
        """Case argv for the smallest run that still exercises the case (its [tiny] table), for tests and
        `make bench --tiny`. Overrides use underscores for dashes (num_iters=500) and replace or add
        values; None or False drops an option, True is a bare flag."""
        options = {**self.spec.get("tiny", {}), **{k.replace("_", "-"): v for k, v in overrides.items()}}
        return option_args(options)

    def check_world(self, options: dict, world) -> None:
        """The case's rules that name the run point (nodes, devices, devices_per_node), for each host of `world`."""
        for host in world.hosts:
            facts = {"nodes": world.nodes, "devices": world.devices, "devices_per_node": host.slots}
            try:
                check_rules(self.spec, options, facts)
            except RuleError as exc:
                raise UsageError(f"case {self.name} at {world.nodes} node(s), {host.slots} device(s) on {host.name}: "
                                 f"{exc}") from None

    def parse_options(self, argv: list[str]) -> dict:
        try:
            return parse_options(self.spec, argv)
        except RuleError as exc:
            raise UsageError(f"case {self.name}: {exc}") from None
        except OptionError as exc:
            known = " ".join(f"--{name}" for name in self.spec.get("options", {}))
            raise UsageError(f"case {self.name}: {exc} (its options: {known})") from None


def known_cases() -> list[str]:
    return sorted(p.parent.name for p in paths.CASES.glob("*/case.toml"))


OPTION_KEYS = {"type", "default", "min", "max", "choices", "pattern", "pattern_text", "help"}
OPTION_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "flag": ()}


def load_case(name: str) -> Case:
    if name not in known_cases():
        raise UsageError(f"unknown case '{name}' (known cases: {', '.join(known_cases())})")
    case_dir = paths.CASES / name
    case = Case(name, case_dir, load_case_toml(case_dir))
    for option, spec in case.spec.get("options", {}).items():
        if problem := option_spec_problem(spec):
            raise UsageError(f"case {name}: {case_dir / 'case.toml'}: [options.{option}] {problem}")
    return case


def option_spec_problem(spec: dict) -> str | None:
    """What is wrong with an [options.NAME] table of a case.toml: a key or type it cannot have, a default of
    another type."""
    if unknown := sorted(set(spec) - OPTION_KEYS):
        return f"has unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(OPTION_KEYS))})"
    if spec.get("type") not in OPTION_TYPES:
        return f"type must be one of {', '.join(OPTION_TYPES)}, got {spec.get('type')!r}"
    default = spec.get("default")
    allowed = OPTION_TYPES[spec["type"]]
    if default is not None and allowed and (isinstance(default, bool) or not isinstance(default, allowed)):
        return f"default {default!r} is not of its type {spec['type']}"
    return None
