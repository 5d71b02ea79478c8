"""Cluster profiles: hostfiles/<name>.toml says how a cluster is used (which hostfile, scheduler,
devices per node, data and image folders, interconnect figures, and a table of settings per
scheduler or runtime, e.g. [ssh] or [slurm]). Porting the suite to a cluster is writing one of these.
Unknown keys are refused, so a typo cannot pass silently. The keys of a plugin's table are declared
by the plugin (its PROFILE, see suite/execution/plugins.py)."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.instack.cpu_binding import POLICIES

KEYS = {
    "": {"description", "example", "hostfile", "scheduler", "runtime", "devices_per_node", "device_model",
         "data_dir", "container_dir", "interconnect", "env", "cpu_bind", "wheels"},
    "interconnect": {"bandwidth_gbit_s", "latency_us", "description"},
}


@dataclass(frozen=True)
class Cluster:
    name: str
    path: Path
    description: str = ""
    example: bool = False
    hostfile: Path | None = None
    scheduler: str = "local"
    runtime: str = "local"
    devices_per_node: int | None = None
    device_model: str | None = None
    data_dir: Path | None = None
    container_dir: Path | None = None
    interconnect: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    cpu_bind: str = "none"  # default --cpu-bind of runs on this cluster (suite/instack/cpu_binding.py)
    wheels: Path | None = None  # local stacks install from this wheel folder alone (compute nodes without internet)
    plugins: dict = field(default_factory=dict)  # the table of each scheduler/runtime, by its name

    def section(self, plugin: str) -> dict:
        """The profile's table of a scheduler or runtime, e.g. section("slurm") is [slurm]."""
        return self.plugins.get(plugin, {})


def plugin_settings() -> dict[str, dict[str, plugins.Setting]]:
    """The profile tables that schedulers and runtimes declare, by plugin name."""
    return {p.name: p.PROFILE for kind in ("schedulers", "runtimes") for p in plugins.load_all(kind) if p.PROFILE}


def known_clusters() -> list[str]:
    return sorted(p.stem for p in paths.HOSTFILES.glob("*.toml"))


def load_cluster(name: str) -> Cluster:
    path = paths.HOSTFILES / f"{name}.toml"
    if not path.exists():
        raise UsageError(f"unknown cluster '{name}' (profiles in hostfiles/: {', '.join(known_clusters()) or 'none'})")
    try:
        spec = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cluster profile {path}: {exc}") from None
    declared = plugin_settings()
    _check_keys(spec, path, declared)
    if spec.get("cpu_bind", "none") not in POLICIES:
        raise UsageError(f"cluster profile {path}: cpu_bind must be one of {', '.join(POLICIES)}, "
                         f"got {spec['cpu_bind']!r}")
    relative = {k: _resolve(spec[k], paths.HOSTFILES if k == "hostfile" else paths.ROOT)
                for k in ("hostfile", "data_dir", "container_dir", "wheels") if k in spec}
    tables = {name: _with_defaults(spec.pop(name), settings, name, path)
              for name, settings in declared.items() if name in spec}
    return Cluster(name=name, path=path, **{**spec, **relative}, plugins=tables)


def _check_keys(spec: dict, path: Path, declared: dict) -> None:
    allowed_at = {**KEYS, **{name: set(settings) for name, settings in declared.items()}}
    allowed_at[""] = KEYS[""] | set(declared)
    for section, allowed in allowed_at.items():
        table = spec.get(section, {}) if section else spec
        if not isinstance(table, dict):
            raise UsageError(f"cluster profile {path}: '{section}' must be a table")
        for key in table:
            if key not in allowed:
                where = f"[{section}] " if section else ""
                raise UsageError(f"cluster profile {path}: unknown key {where}'{key}' "
                                 f"(allowed: {', '.join(sorted(allowed))})")


TYPE_WORDS = {list: "list of strings", str: "string", int: "integer", bool: "boolean (true or false)",
              float: "number"}


def _is_a(value, wanted: type) -> bool:
    if wanted is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if wanted is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool))


def _with_defaults(table: dict, settings: dict, name: str, path: Path) -> dict:
    """A plugin's table, each value of its declared type, each template holding only the placeholders
    its setting fills (checked further by the plugin itself)."""
    for key, value in table.items():
        setting = settings[key]
        if not _is_a(value, setting.type):
            raise UsageError(f"cluster profile {path}: [{name}] {key} must be a {TYPE_WORDS[setting.type]} "
                             f"({setting.help}), got {value!r}")
        for template in (value if isinstance(value, list) else [value]) if setting.fields else ():
            if problem := plugins.template_problem(template, setting.fields):
                raise UsageError(f"cluster profile {path}: [{name}] {key} = {template!r}: {problem}")
    return {**{k: s.default for k, s in settings.items() if s.default is not None}, **table}


def _resolve(value: str, base: Path) -> Path:
    """A relative hostfile is one in hostfiles/; other relative folders are in the checkout."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path
