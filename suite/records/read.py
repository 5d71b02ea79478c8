"""Reading result records back: every valid record under a folder, as flat points for reports and
comparisons. A file that is not a valid record is named in a warning and skipped. A folder is read
through its results index (suite/records/index.py); a single file directly, with the full check."""

import json
import statistics

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass, field
from pathlib import Path

from suite.base import paths
from suite.inputs.cases import Case
from suite.records import index
from suite.records.schema import problem


@dataclass(frozen=True)
class Point:
    """One successful record, reduced to what plots, tables and comparisons need. `record` is the whole
    record, or where `complete` is False (read through the index) the record without its bulky parts
    (index.BULKY): full_record() reads the rest."""

    record: dict = field(repr=False, compare=False)
    path: str
    complete: bool = field(default=True, repr=False, compare=False)

    def full_record(self) -> dict:
        """The whole record, from its file where the point holds only the index's summary of it (the
        summary where the file cannot be read any more)."""
        if self.complete:
            return self.record
        try:
            return json.loads(Path(self.path).read_text())
        except (OSError, ValueError):
            return self.record

    @property
    def case(self) -> str:
        return self.record["case"]

    @property
    def stack(self) -> str:
        return self.record["execution"]["stack"]

    @property
    def cluster(self) -> str:
        return index.cluster_of(self.record["world"])

    @property
    def devices(self) -> int:
        return self.record["world"]["devices"]

    @property
    def nodes(self) -> int:
        return self.record["world"]["nodes"]

    @property
    def throughput(self) -> dict:
        return self.record["metrics"]["throughput"]

    @property
    def finished_at(self) -> str:
        return self.record["finished_at"]

    @property
    def config_key(self) -> tuple:
        """What must be equal for two records to measure the same thing."""
        cfg = self.record["config"]
        return (cfg.get("model"), cfg.get("image_size"), cfg.get("batch_per_device"), cfg.get("dtype"),
                cfg.get("data"), self.record["provenance"].get("stack_lock_sha256"))

    @property
    def config_label(self) -> str:
        cfg = self.record["config"]
        return (f"{cfg.get('model')}, {cfg.get('image_size')} px, batch {cfg.get('batch_per_device')}/device, "
                f"{cfg.get('dtype')}")

    @property
    def epoch_seconds(self) -> float | None:
        """Mean epoch time without each repetition's first epoch, for epoch-based cases."""
        timed = [e["seconds"] for e in self.record["metrics"].get("epochs", []) if e["index"] > 0]
        return statistics.fmean(timed) if timed else None

    def hover(self) -> str:
        prov = self.record["provenance"]
        lock = (prov.get("stack_lock_sha256") or "")[:12]
        image = prov.get("image_sha256") or prov.get("image") or "local stack"
        return (f"run {self.record['run_id']}<br>{self.finished_at}<br>hosts {', '.join(self.record['world']['hosts'])}"
                f"<br>{self.config_label}<br>stack {self.stack} lock {lock}<br>image {image}")


def latest(points, key) -> dict:
    """key(point) -> the most recently finished point with that key."""
    return {key(p): p for p in sorted(points, key=lambda p: p.finished_at)}


def load_point(path: Path, warn=print) -> Point | None:
    """The record in `path` if it is a valid successful record; failed records are not plotted."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        warn(f"warning: skipped {path}: {str(exc).splitlines()[0][:200]}")
        return None
    why = problem(record)
    if why:
        warn(f"warning: skipped {path}: {why}")
        return None
    return Point(record, str(path)) if record["status"] == "ok" else None


def load_points(source: Path, warn=print, *selections: index.Selection,
                newest_per: tuple[str, ...] = ()) -> list[Point]:
    """Every usable record of a single file, or of a folder (its *.json files, through the index: those
    every one of `selections` admits, and with `newest_per` the latest per value of those columns)."""
    source = Path(source)
    if not source.is_dir():
        return [p for p in [load_point(source, warn)] if p is not None]
    entries = index.select(source, index.Selection(status="ok"), *selections, warn=warn, newest_per=newest_per)
    return [Point(json.loads(e.summary), str(e.path), complete=False) for e in entries]


# The frameworks a case names in provenance.versions (its package -> the name tables show), in the order
# a record's frameworks are named (the framework before the library that exchanges its gradients); the
# site check looks for the same packages in a site's environment (suite/execution/site_paths.py).
FRAMEWORKS = {"torch": "PyTorch", "jax": "JAX", "mxnet": "MXNet", "tensorflow": "TensorFlow", "horovod": "Horovod"}


def record_frameworks(record: dict) -> list[tuple[str, str]]:
    """(name, version) of each framework the record's case reported, in FRAMEWORKS' order."""
    versions = record.get("provenance", {}).get("versions") or {}
    return [(name, versions[package]) for package, name in FRAMEWORKS.items() if versions.get(package)]


def first_host_info(record: dict) -> dict:
    """The host facts of the record's first host ({} where it has none): the host that stands for all of them."""
    return next(iter((record["provenance"].get("host_info") or {}).values()), None) or {}


def case_spec(case: str) -> dict:
    """The case.toml of a case, or {} for a case this checkout does not have (records from elsewhere)."""
    try:
        with open(paths.CASES / case / "case.toml", "rb") as f:
            return tomllib.load(f)
    except OSError:
        return {}


DEFAULT_UNIT = "img/s"  # records and cases that do not say: the image cases (Case.throughput_unit)


def case_unit(case: str) -> str:
    """The unit a case's case.toml names (unit = "tokens": tokens/s), img/s where it names none or the
    checkout has no such case (records from elsewhere)."""
    return Case(case, paths.CASES / case, case_spec(case)).throughput_unit


def case_references(case: str) -> list[dict]:
    """The published figures a case ships in its case.toml ([[reference]] tables)."""
    return case_spec(case).get("reference", [])


def record_files(folder: Path) -> set[Path]:
    """The record files of a results folder now: what `new_records` is told was there before."""
    return set(Path(folder).glob("*.json"))


def new_records(folder: Path, before: set[Path]) -> list[Path]:
    """The record files written into `folder` since `before` (record_files' answer then), by name."""
    return sorted(record_files(folder) - before)
