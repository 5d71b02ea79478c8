"""Cluster profiles: hostfiles/<name>.toml says how a cluster is used (which hostfile, scheduler,
devices per node, data and image folders, interconnect figures, ssh and SLURM settings). Porting the
suite to a cluster is writing one of these. Unknown keys are refused, so a typo cannot pass silently."""

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from suite import paths
from suite.errors import UsageError

KEYS = {
    "": {"description", "example", "hostfile", "scheduler", "runtime", "devices_per_node", "device_model",
         "data_dir", "container_dir", "interconnect", "ssh", "slurm", "env"},
    "interconnect": {"bandwidth_gbit_s", "latency_us", "description"},
    "ssh": {"options", "user", "force"},
    "slurm": {"partition", "account", "reservation", "qos", "time_limit", "cpus_per_task", "gres", "modules",
              "extra_directives", "constraint"},
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
    ssh: dict = field(default_factory=dict)
    slurm: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)


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
    _check_keys(spec, path)
    relative = {k: _resolve(spec[k], paths.HOSTFILES if k == "hostfile" else paths.ROOT)
                for k in ("hostfile", "data_dir", "container_dir") if k in spec}
    return Cluster(name=name, path=path, **{**spec, **relative})


def _check_keys(spec: dict, path: Path) -> None:
    for section, allowed in KEYS.items():
        table = spec.get(section, {}) if section else spec
        if not isinstance(table, dict):
            raise UsageError(f"cluster profile {path}: '{section}' must be a table")
        for key in table:
            if key not in allowed:
                where = f"[{section}] " if section else ""
                raise UsageError(f"cluster profile {path}: unknown key {where}'{key}' (allowed: {', '.join(sorted(allowed))})")


def _resolve(value: str, base: Path) -> Path:
    """A relative hostfile is one in hostfiles/; other relative folders are in the checkout."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path
