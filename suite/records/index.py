"""The results index: a SQLite file beside the records (<results>/.index.sqlite) that remembers what
each JSON file held, so that a read of 10,000 records neither parses nor checks them all again.
The JSON files stay the source of truth, written atomically as before; the index is a
cache of them, brought up to date on every read:

- one row per *.json file, keyed by its name, with the size and mtime_ns it had when read and the
  sha256 of its content. A file added or changed (another size or mtime) is read again, a removed
  one's row dropped; content checked before (the same sha256: a file touched, renamed or copied) is
  not checked again.
- new content gets the full check against the record schema (schema.problem). A file that fails it
  (not JSON, not a record, a record of a newer schema) keeps its one-line problem, is named in a
  warning on every read and is never listed as a record.
- a record's row holds the columns `suite query` selects on and the record without its bulky parts
  (`summary`, see BULKY): what reports and comparisons read.

The index says which schema its checks were made against and its own LAYOUT; an index of another
one, or a file SQLite cannot read, is made again. Where the results folder cannot be written, the
index lives in the user's cache folder, and where SQLite cannot write there either, in memory for the
one command. A command takes SQLite's write lock only to store what it found, so several commands may
read and update one folder at once. Reads records only: imports no running code."""

import hashlib
import json
import os
import re
import sqlite3
from concurrent.futures import ProcessPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.records.schema import SCHEMA_SHA256, problem

INDEX_FILE = ".index.sqlite"
MEMORY = ":memory:"  # SQLite's name for an index that lasts one command
LAYOUT = 1  # of the tables below; an index of another layout is made again
COLUMNS = ("run_id", "case_name", "cluster", "stack", "fingerprint", "devices", "nodes", "started_at",
           "finished_at", "status", "throughput")
TABLES = [
    """CREATE TABLE files (
        name TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL,
        problem TEXT,  -- why the file is not a record; the columns below are then NULL
        run_id TEXT, case_name TEXT, cluster TEXT, stack TEXT, fingerprint TEXT, devices INTEGER,
        nodes INTEGER, started_at TEXT, finished_at TEXT, status TEXT, throughput REAL, summary TEXT)""",
    "CREATE INDEX files_sha256 ON files (sha256)",
    "CREATE TABLE made_for (layout_and_schema TEXT)",
]
# Left out of `summary` (None: this key; "*": every key): what no report, comparison or prediction
# reads of most records. The report reads a telemetry series from the file itself (Point.full_record),
# for the few points it draws.
BULKY = {"repetitions": None,
         "metrics": {"throughput": {"samples": None}, "interconnect": {"sizes": None},
                     "telemetry": {"hosts": {"*": {"series": None, "cpu_util_per_core_pct": None}}}},
         "provenance": {"environment": None, "stack_packages": None, "host_info": None, "image_system_packages": None}}
BATCH = 500  # files read, checked and stored per transaction: memory stays bounded, and work is kept if stopped
PARALLEL_FROM = 200  # new files from which the check runs in a process per core
DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}(:\d{2}(:\d{2})?)?)?Z?")
STATUSES = ("ok", "failed", "all")


@dataclass(frozen=True)
class Selection:
    """Which records: every field that is set must match. fingerprint: its first characters;
    devices: one of them; since / until: finished at or after / on or before (UTC, YYYY-MM-DD or
    YYYY-MM-DDTHH:MM:SS; until a day includes that day)."""

    case: str | None = None
    cluster: str | None = None
    stack: str | None = None
    fingerprint: str | None = None
    devices: tuple[int, ...] = ()
    since: str | None = None
    until: str | None = None
    status: str = "all"

    def __post_init__(self):
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and not (DATE.fullmatch(value) and real_date(value)):
                raise UsageError(f"{name} {value!r}: a UTC date YYYY-MM-DD or time YYYY-MM-DDTHH:MM:SS that exists")
        if self.status not in STATUSES:
            raise UsageError(f"status {self.status!r}: one of {', '.join(STATUSES)}")

    def where(self) -> tuple[list[str], list]:
        """The SQL conditions on the files table, and their values."""
        clauses, values = [], []
        for column, value in (("case_name", self.case), ("cluster", self.cluster), ("stack", self.stack),
                              ("status", None if self.status == "all" else self.status)):
            if value:
                clauses.append(f"{column} = ?")
                values.append(value)
        if self.fingerprint:
            clauses.append("substr(fingerprint, 1, ?) = ?")
            values += [len(self.fingerprint), self.fingerprint]
        if self.devices:
            clauses.append(f"devices IN ({', '.join('?' * len(self.devices))})")
            values += list(self.devices)
        if self.since:
            clauses.append("finished_at >= ?")
            values.append(self.since.rstrip("Z"))
        if self.until:
            until = self.until.rstrip("Z")
            clauses.append("substr(finished_at, 1, ?) <= ?")
            values += [len(until), until]
        return clauses, values


@dataclass(frozen=True)
class Entry:
    """One record as the index holds it (`summary`: None where not asked for)."""

    path: Path
    run_id: str
    case: str
    cluster: str
    stack: str
    fingerprint: str | None
    devices: int
    nodes: int
    started_at: str
    finished_at: str
    status: str
    throughput: float | None
    summary: str | None = None


def real_date(text: str) -> bool:
    """Whether a date or time of the calendar's form is also one of the calendar (no 2026-02-30, no 25:00)."""
    try:
        datetime.fromisoformat(text.rstrip("Z"))
    except ValueError:
        return False
    return True


def devices_list(text: str) -> tuple[int, ...]:
    """`8` or `1,2,4` as device counts."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise UsageError(f"devices {text!r}: a device count or a comma-separated list of them, e.g. 8 or 1,2,4")
    return counts


def select(folder: Path, *selections: Selection, warn=print, summaries: bool = True,
           newest_per: tuple[str, ...] = ()) -> list[Entry]:
    """The records of `folder` that every one of `selections` admits, by file name, with the index
    brought up to date first; with `newest_per` (columns, e.g. case_name, devices) only the most
    recently finished record per value of them (ties: the last by name). Every file that is not a
    record is named in one warning line."""
    folder = Path(folder)
    assert set(newest_per) <= set(COLUMNS), newest_per
    problems, entries = _read(folder, lambda db, present: _entries(db, folder, present, selections, summaries,
                                                                    newest_per))
    for name, why in problems:
        warn(f"warning: skipped {folder / name}: {why}")
    return entries


def cluster_of(world: dict) -> str:
    """The cluster a record's points are grouped by: its profile's name, else its hostfile's."""
    return world.get("cluster") or Path(world["hostfile"]).stem


def summary(record: dict) -> dict:
    """The record without its bulky parts (BULKY)."""
    return _without(record, BULKY)


def _without(node, bulky: dict):
    if not isinstance(node, dict):
        return node
    kept = dict(node)
    for key, below in bulky.items():
        for name in list(kept) if key == "*" else [key] if key in kept else []:
            if below is None:
                del kept[name]
            else:
                kept[name] = _without(kept[name], below)
    return kept


# -- where the index lives, and what is done when it cannot be used -------------------------------

def _read(folder: Path, entries):
    """(problems, entries(db, present)) through the first index that can be used: the folder's, the
    cache's, memory's."""
    for location in _locations(folder):
        for _ in range(2):
            try:
                with closing(_connect(location)) as db:
                    present = _refresh(db, folder)
                    return _problems(db, present), entries(db, present)
            except (sqlite3.OperationalError, OSError):  # read-only, or locked past the timeout
                if location == MEMORY:
                    raise
                break  # the next location
            except sqlite3.DatabaseError:  # not an SQLite file, or a damaged one: made again
                if location == MEMORY:
                    raise
                _remove(location)


def _locations(folder: Path) -> list[str]:
    named = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]
    cached = paths.cache_home() / "index" / f"{named}.sqlite"
    beside = [str(folder / INDEX_FILE)] if os.access(folder, os.W_OK) else []
    return [*beside, str(cached), MEMORY]


def _connect(location: str) -> sqlite3.Connection:
    if location != MEMORY:
        Path(location).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(location, timeout=60, isolation_level=None)  # transactions begun explicitly
    expected = f"{LAYOUT} {SCHEMA_SHA256}"
    if _made_for(db) != expected:
        with _writing(db):
            if _made_for(db) != expected:  # another command may have made it meanwhile
                for table in ("files", "made_for"):
                    db.execute(f"DROP TABLE IF EXISTS {table}")
                for statement in TABLES:
                    db.execute(statement)
                db.execute("INSERT INTO made_for VALUES (?)", (expected,))
    return db


def _made_for(db: sqlite3.Connection) -> str | None:
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'made_for'").fetchone():
        return None
    row = db.execute("SELECT layout_and_schema FROM made_for").fetchone()
    return row[0] if row else None


@contextmanager
def _writing(db: sqlite3.Connection):
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _remove(location: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        Path(location + suffix).unlink(missing_ok=True)


# -- bringing it up to date ------------------------------------------------------------------------

def _refresh(db: sqlite3.Connection, folder: Path) -> dict[str, tuple[int, int]]:
    """Reads the files added or changed since the index last saw them and drops the removed ones,
    BATCH files per transaction; returns the folder's files as found (name -> size, mtime_ns)."""
    present = _listing(folder)
    known = {name: (size, mtime) for name, size, mtime in db.execute("SELECT name, size, mtime_ns FROM files")}
    changed = [name for name in sorted(present) if known.get(name) != present[name]]
    gone = [(name,) for name in known if name not in present]
    if gone:
        with _writing(db):
            db.executemany("DELETE FROM files WHERE name = ?", gone)
    with _checker(len(changed)) as check:
        for first in range(0, len(changed), BATCH):
            rows = _examine(db, folder, changed[first:first + BATCH], check)
            with _writing(db):
                db.executemany(f"INSERT OR REPLACE INTO files VALUES ({', '.join('?' * (6 + len(COLUMNS)))})", rows)
    return present


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    found = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                if entry.name.endswith(".json") and entry.is_file():
                    stat = entry.stat()
                    found[entry.name] = (stat.st_size, stat.st_mtime_ns)
            except FileNotFoundError:  # removed meanwhile
                continue
    return found


@dataclass
class _File:
    name: str
    size: int
    mtime_ns: int  # -1 for a file that could not be read: read again next time (permissions change no mtime)
    sha256: str
    data: bytes | None
    problem: str | None = None


def _examine(db: sqlite3.Connection, folder: Path, names: list[str], check) -> list[tuple]:
    """The rows of new or changed files (none for a file gone meanwhile): content seen before (the same
    sha256) keeps what its row says, new content is checked."""
    files = [f for f in map(_read_file, (folder / name for name in names)) if f is not None]
    found = {f.sha256: _seen(db, f.sha256) for f in files if f.data is not None}
    new = {f.sha256: f.data for f in files if f.data is not None and found[f.sha256] is None}
    found.update(zip(new, check(list(new.values()))))
    return [(f.name, f.size, f.mtime_ns, f.sha256,
             *(found[f.sha256] if f.data is not None else _not_a_record(f.problem))) for f in files]


def _read_file(path: Path) -> _File | None:
    try:
        with open(path, "rb") as f:
            stat, data = os.fstat(f.fileno()), f.read()  # the size and time of what was read
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _File(path.name, 0, -1, "", None, f"cannot read: {exc.strerror}")
    return _File(path.name, stat.st_size, stat.st_mtime_ns, hashlib.sha256(data).hexdigest(), data)


def _seen(db: sqlite3.Connection, sha256: str) -> tuple | None:
    row = db.execute(f"SELECT problem, {', '.join(COLUMNS)}, summary FROM files WHERE sha256 = ? LIMIT 1",
                     (sha256,)).fetchone()
    return tuple(row) if row else None


@contextmanager
def _checker(count: int):
    """A function that checks a list of contents: in a process per core where there are PARALLEL_FROM
    or more (JSON parsing is most of the cost of a first read, and it is per file)."""
    cores = len(os.sched_getaffinity(0))
    pool = None
    if count >= PARALLEL_FROM and cores > 1:
        try:
            pool = ProcessPoolExecutor(min(cores, 16))
        except (OSError, ImportError):  # no process pools here (no semaphores): one process does it all
            pool = None
    if pool is None:
        yield lambda contents: [_check(data) for data in contents]
        return
    with pool:
        yield lambda contents: list(pool.map(_check, contents, chunksize=32))


def _not_a_record(why: str) -> tuple:
    return (why, *[None] * (len(COLUMNS) + 1))


def _check(data: bytes) -> tuple:
    """(problem, columns..., summary) of a file's content, after the full check."""
    try:
        record = json.loads(data)
    except ValueError as exc:
        return _not_a_record(f"not JSON: {str(exc).splitlines()[0][:200]}")
    why = problem(record)
    if why:
        return _not_a_record(why)
    try:
        columns = _columns(record)
    except TypeError as exc:  # a part the schema leaves open, of a kind no report could read
        return _not_a_record(f"not a record this suite reads: {exc}")
    return (None, *columns, json.dumps(summary(record), separators=(",", ":")))


def _columns(record: dict) -> tuple:
    world, provenance = record["world"], record["provenance"]
    # the environment's fingerprint: the stack lock's hash until records carry one of their own
    fingerprint = provenance.get("environment_fingerprint") or provenance.get("stack_lock_sha256")
    values = (record["run_id"], record["case"], cluster_of(world), record["execution"]["stack"], fingerprint,
              world["devices"], world["nodes"], record["started_at"], record["finished_at"], record["status"],
              record["metrics"]["throughput"]["mean"])
    return tuple(v if v is None or isinstance(v, (str, int, float)) else json.dumps(v) for v in values)


# -- reading it ------------------------------------------------------------------------------------

def _problems(db: sqlite3.Connection, present: dict) -> list[tuple[str, str]]:
    rows = db.execute("SELECT name, problem FROM files WHERE problem IS NOT NULL ORDER BY name")
    return [(name, why) for name, why in rows if name in present]


def _entries(db: sqlite3.Connection, folder: Path, present: dict, selections, summaries: bool,
             newest_per: tuple[str, ...]) -> list[Entry]:
    clauses, values = ["problem IS NULL"], []
    for selection in selections:
        more, given = selection.where()
        clauses, values = clauses + more, values + given
    rows = f"SELECT * FROM files WHERE {' AND '.join(clauses)}"
    if newest_per:
        rows = (f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {', '.join(newest_per)} "
                f"ORDER BY finished_at DESC, name DESC) AS newest FROM ({rows})) WHERE newest = 1")
    found = db.execute(f"SELECT name, {', '.join(COLUMNS)}, {'summary' if summaries else 'NULL'} FROM ({rows}) "
                       "ORDER BY name", values)
    return [Entry(folder / name, *rest) for name, *rest in found if name in present]
