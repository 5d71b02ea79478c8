"""Cluster profiles: hostfiles/<name>.toml says how a cluster is used (which hostfile, scheduler,
devices per node, data and image folders, interconnect figures, and a table of settings per
scheduler or runtime, e.g. [ssh] or [slurm]). Porting the suite to a cluster is writing one of these.
Unknown keys are refused, so a typo cannot pass silently. The keys of a plugin's table are declared
by the plugin (its PROFILE, see suite/execution/plugins.py)."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from suite.base import paths
from suite.base.env_policy import SECRET_NAME
from suite.base.errors import UsageError
from suite.execution import plugins
from suite.inputs.host_network import INTERFACE_VARIABLES
from suite.instack.cpu_binding import POLICIES

# The type of each key, by table ("": the top level; tables of plugins are typed by their PROFILE).
TYPES = {
    "": {"description": str, "example": bool, "hostfile": str, "scheduler": str, "runtime": str,
         "devices_per_node": int, "device_model": str, "data_dir": str, "container_dir": str, "interconnect": dict,
         "env": dict, "cpu_bind": str, "wheels": str},
    "interconnect": {"bandwidth_gbit_s": float, "latency_us": float, "description": str},
}
KEYS = {table: set(types) for table, types in TYPES.items()}
POSITIVE = {("", "devices_per_node"), ("interconnect", "bandwidth_gbit_s")}  # above 0; other numbers at least 0


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
    env: dict = field(default_factory=dict)  # set in every process of a run (applied_env); values as strings
    cpu_bind: str = "none"  # default --cpu-bind of runs on this cluster (suite/instack/cpu_binding.py)
    wheels: Path | None = None  # local stacks install from this wheel folder alone (compute nodes without internet)
    plugins: dict = field(default_factory=dict)  # the table of each scheduler/runtime, by its name

    @property
    def given_as(self) -> str:
        """How CLUSTER names this profile again (a run started by another command): its name where it is one of
        hostfiles/, else its file's path."""
        return self.name if self.path.parent == paths.HOSTFILES else str(self.path)

    def section(self, plugin: str) -> dict:
        """The profile's table of a scheduler or runtime, e.g. section("slurm") is [slurm]."""
        return self.plugins.get(plugin, {})


def plugin_settings() -> dict[str, dict[str, plugins.Setting]]:
    """The profile tables that schedulers and runtimes declare, by plugin name."""
    return {p.name: p.PROFILE for kind in ("schedulers", "runtimes") for p in plugins.load_all(kind) if p.PROFILE}


def known_clusters() -> list[str]:
    return sorted(p.stem for p in paths.HOSTFILES.glob("*.toml"))


def names_a_file(cluster: str) -> bool:
    """Whether CLUSTER is the path of a profile file rather than the name of one in hostfiles/."""
    return cluster.endswith(".toml") or "/" in cluster


def profile_path(name: str) -> Path:
    """hostfiles/NAME.toml, or the file NAME names where it is a path (a site keeping its profile elsewhere)."""
    return Path(name).expanduser().absolute() if names_a_file(name) else paths.HOSTFILES / f"{name}.toml"


def load_cluster(name: str) -> Cluster:
    path = profile_path(name)
    if not path.is_file():
        if path.parent != paths.HOSTFILES:
            raise UsageError(f"no cluster profile file {path}")
        raise UsageError(f"unknown cluster '{name}' (profiles in hostfiles/: {', '.join(known_clusters()) or 'none'})")
    name = path.stem
    try:
        spec = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cluster profile {path}: {exc}") from None
    declared = plugin_settings()
    _check_keys(spec, path, declared)
    _check_types(spec, path)
    if spec.get("cpu_bind", "none") not in POLICIES:
        raise UsageError(f"cluster profile {path}: cpu_bind must be one of {', '.join(POLICIES)}, "
                         f"got {spec['cpu_bind']!r}")
    relative = {k: _resolve(spec[k], path.parent if k == "hostfile" else paths.ROOT)
                for k in ("hostfile", "data_dir", "container_dir", "wheels") if k in spec}
    if "env" in spec:
        spec["env"] = _checked_env(spec["env"], path)
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


def _check_types(spec: dict, path: Path) -> None:
    """Each value of the top level and of [interconnect] of its key's type (numbers in range)."""
    for table, types in TYPES.items():
        values = spec.get(table, {}) if table else spec
        for key, value in values.items() if isinstance(values, dict) else ():
            wanted, where = types.get(key), f"cluster profile {path}: {f'[{table}] ' if table else ''}{key}"
            if wanted is dict and not isinstance(value, dict):
                raise UsageError(f"{where} must be a table ([{key}] with its keys below it), got {value!r}")
            if wanted not in (None, dict) and not _is_a(value, wanted):
                raise UsageError(f"{where} must be {TYPE_WORDS[wanted]}, got {value!r}")
            if wanted in (int, float) and (value <= 0 if (table, key) in POSITIVE else value < 0):
                raise UsageError(f"{where} must be {'above' if (table, key) in POSITIVE else 'at least'} 0, "
                                 f"got {value!r}")


# What the runner sets in each process for the run (SUITE_*) and its stack (PATH, PYTHONPATH). A launcher's own
# variables (RANK, MASTER_ADDR, DMLC_ROLE ...) win over the profile's in the processes it plans.
SET_BY_THE_RUNNER = re.compile(r"SUITE_\w*|PATH|PYTHONPATH")


def _checked_env(table: dict, path: Path) -> dict[str, str]:
    """[env]: variable names and values (strings or numbers), as the processes get them (strings)."""
    env = {}
    for name, value in table.items():
        where = f"cluster profile {path}: [env] {name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"{where}: not a variable name (letters, digits and _, not starting with a digit)")
        if SET_BY_THE_RUNNER.fullmatch(name):
            raise UsageError(f"{where}: the runner sets it for the run and its stack; leave it out")
        if SECRET_NAME.search(name):
            raise UsageError(f"{where}: looks like a credential; a profile is shared and named by records, so "
                             "set it in the environment the run starts from")
        if not _is_a(value, str) and not _is_a(value, float):
            raise UsageError(f"{where} must be a string or a number, got {value!r}")
        env[name] = str(value)
    return env


def applied_env(cluster: "Cluster | None", environ: Mapping[str, str]) -> dict[str, str]:
    """The profile's [env] as a run applies it: each variable the run's own environment sets keeps its value
    there (what is given with the run wins over the profile, as for every other setting)."""
    return {name: environ.get(name, value) for name, value in (cluster.env if cluster else {}).items()}


def interface_settings(cluster: "Cluster | None", environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """The variables naming the processes' network interfaces that this run sets, each with its value and
    where it comes from (the run's environment wins over the profile's [env], as applied_env)."""
    profile = cluster.env if cluster else {}
    settings = {}
    for name in INTERFACE_VARIABLES:
        if name in environ:
            value, whence = environ[name], "the run's environment"
        else:
            value, whence = str(profile.get(name, "")), f"[env] of cluster profile {cluster and cluster.given_as}"
        if value.strip():
            settings[name] = (value, whence)
    return settings


TYPE_WORDS = {list: "a list of strings", str: "a string", int: "an integer", bool: "a boolean (true or false)",
              float: "a number"}


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
            raise UsageError(f"cluster profile {path}: [{name}] {key} must be {TYPE_WORDS[setting.type]} "
                             f"({setting.help}), got {value!r}")
        for template in (value if isinstance(value, list) else [value]) if setting.fields else ():
            if problem := plugins.template_problem(template, setting.fields):
                raise UsageError(f"cluster profile {path}: [{name}] {key} = {template!r}: {problem}")
    return {**{k: s.default for k, s in settings.items() if s.default is not None}, **table}


def _resolve(value: str, base: Path) -> Path:
    """A relative hostfile is one beside the profile (hostfiles/); other relative folders are in the checkout."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path
