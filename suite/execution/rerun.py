"""The rerun engine behind `suite rerun RECORD.json`: a record's request read back, every drift from it
named before launch, the point run again on the hosts at hand and compared with the record.

Same case and case arguments, nodes x devices per node, runtime, stack and repetitions. Before launch,
every difference that could change the result (stack lock and recipe, image digest, or a site's
environment: its modules, their files, Python and packages; the suite's checkout, case option values
the same arguments now resolve to, devices per node, device type) is one `drift:` line, and the
rerun is refused (exit 2) unless --allow-drift. What cannot be rerun (unknown case, too few hosts,
missing data or image, a record newer than this suite) is one `error:` line.
"""

import json
import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import jsonschema

from suite.analysis.compare import Row, format_rows, judge, systems_line
from suite.base import paths
from suite.base.env_policy import MASK, masked_env, recorded_env
from suite.base.errors import UsageError
from suite.execution.clusters import names_a_file
from suite.execution.console import nccl_files_text
from suite.execution.request import SUITE, RunRequest, from_record
from suite.execution.run import Checked, check, prepare, run
from suite.instack.probe import host_info, nccl_conf
from suite.records.provenance import git_state
from suite.records.read import first_host_info, load_point
from suite.records.schema import SCHEMA_VERSION, validate
from suite.records.write import new_run_id
from suite.stacks.recipes import load_flavour


def rerun(asked) -> int:
    """`asked`: the rerun command's request (suite/commands/rerun.py: record, argv, hosts, folders, tolerance,
    allow_drift, dry_run)."""
    path = Path(asked.record)
    record = load_record(path)
    req = request(record, asked)
    checked = possible(path, lambda: check(req))
    drift = possible(path, lambda: differences(record, req, checked))
    for line in notes(record, checked):
        print(f"note: {line}")
    if drift and not asked.allow_drift:
        for line in drift:
            print(f"drift: {line}", file=sys.stderr)
        raise UsageError(f"rerun of {record['run_id']} refused: {len(drift)} difference(s) from the record, one "
                         "per 'drift:' line above; remove them or rerun with --allow-drift (Make: ALLOW_DRIFT=1)")
    for line in drift:
        print(f"drift (allowed): {line}")
    if world_drift(record["world"], checked):
        req.gpus_per_node = str(devices_per_node(record["world"]))  # the record's world shape, as asked
        checked = None  # checked again for that shape
    req.rerun_of = {"run_id": record["run_id"], "record": str(path.resolve()), "argv": [*SUITE, *asked.argv],
                    "drift": drift}
    status = run(req, checked=checked)
    if not req.dry_run:
        print(comparison(path, req.results_dir / f"{req.run_id}.json", asked.tolerance))
    return status


def load_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot rerun {path}: {exc}") from None
    version = record.get("schema_version") if isinstance(record, dict) else None
    if version not in range(1, SCHEMA_VERSION + 1):
        raise UsageError(f"cannot rerun {path}: record schema version {version!r}; this suite reads versions "
                         f"1 to {SCHEMA_VERSION} (update the checkout to read newer records)")
    try:
        validate(record)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the record"
        raise UsageError(f"cannot rerun {path}: not a valid record ({where}: {exc.message[:200]})") from None
    return record


def possible(path: Path, step):
    """A step that may find the rerun impossible here (UsageError): says so naming the record."""
    try:
        return step()
    except UsageError as exc:
        raise UsageError(f"cannot rerun {path.name}: {exc}") from None


def devices_per_node(world: dict) -> int:
    counts = set(world["slots"].values())
    if len(counts) != 1:
        raise UsageError(f"cannot rerun: the record's hosts had different device counts ({world['slots']}); a "
                         "rerun asks for one count per node (run it with a hostfile that gives those counts)")
    return counts.pop()


def request(record: dict, asked) -> RunRequest:
    """The record's request (suite.execution.request.from_record) on the hosts at hand: devices per node as the
    original chose them (given: the record's count; else from the hosts, now the current ones, and a
    count that then differs is drift), a new run id, this invocation's folders."""
    original = possible(Path(asked.record), lambda: from_record(record))
    world = record["world"]
    per_node = devices_per_node(world)
    cluster, hostfile = host_source(world, asked, original.cluster)
    return replace(original, case=record["case"], nodes=str(world["nodes"]),
                   gpus_per_node=str(per_node) if original.gpus_per_node else None,
                   cluster=cluster, hostfile=hostfile, runtime=record["execution"]["runtime"],
                   scheduler=None if asked.cluster or asked.hostfile else original.scheduler,
                   results_dir=asked.results_dir, runs_dir=asked.runs_dir, data_dir=asked.data_dir,
                   dry_run=asked.dry_run,
                   run_id=new_run_id(record["case"], world["nodes"], world["devices"]), baseline=None, argv=[],
                   cpu_bind=world.get("binding", {}).get("policy") or original.cpu_bind,
                   flavour=recorded_flavour(record))


def host_source(world: dict, asked, requested: str | None = None) -> tuple[str | None, str | None]:
    """(cluster, hostfile): as given; else the record's cluster profile (a profile file given by its path, where
    that file is still there, or hostfiles/NAME.toml) or hostfile where this checkout has it; else neither
    (hostfiles/localhost). Host names rarely survive, so only the hosts are new."""
    if asked.cluster or asked.hostfile:
        return asked.cluster, asked.hostfile
    if requested and names_a_file(requested) and Path(requested).is_file():
        return requested, None
    name = world.get("cluster") or Path(world["hostfile"]).stem
    if (paths.HOSTFILES / f"{name}.toml").is_file():
        return name, None
    hostfile = paths.ROOT / world["hostfile"]
    return None, (str(hostfile) if hostfile.is_file() else None)


# --- what differs -----------------------------------------------------------------------------------

def differences(record: dict, req: RunRequest, checked: Checked, world: bool = True) -> list[str]:
    """Every drift of `checked` from `record` (or from what is shaped as one: a sweep's plan, whose stack is
    there once it was prepared); world=False: the devices per node left out (a resume checks its points)."""
    prov = record["provenance"]
    if "stack_lock_sha256" not in prov and "stack_location" not in prov:
        stack = []  # a sweep that stopped before its stack was prepared: nothing ran with one
    elif checked.runtime.name == "modules":  # a site's environment: its fingerprint plays the lock's part
        stack = environment_drift(prov, prepare(req, checked).provenance)
    else:
        stack = [*stack_drift(record, checked, req.flavour or recorded_flavour(record)),
                 *image_drift(record, req, checked)]
    return [*stack, *git_drift(prov, git_state()),
            *option_drift(record["config"]["options"], checked.options, checked.case.name),
            *(world_drift(record["world"], checked) if world else []), *device_drift(record, checked)]


def short(digest: str | None) -> str:
    return digest[:12] if digest else "none"


def stack_drift(record: dict, checked: Checked, flavour_name: str) -> list[str]:
    """The record's stack, flavour, lock and build recipe against this checkout's."""
    stack, prov, was = checked.stack, record["provenance"], record["execution"]["stack"]
    if was != stack.name:
        return [f"stack: {was} in the record, {stack.name} in cases/{checked.case.name}/case.toml now"]
    flavour = load_flavour(stack, flavour_name)
    if prov.get("stack_lock_sha256") != flavour.lock_sha256:
        return [f"stack {flavour.id}: {flavour.lock} sha256 {short(prov.get('stack_lock_sha256'))} in the "
                f"record, {short(flavour.lock_sha256)} in {flavour.lock_path.relative_to(paths.ROOT)}"]
    if prov.get("stack_recipe_sha256") not in (None, flavour.recipe_sha256):
        return [f"stack {flavour.id}: build recipe (locks, post-install.sh, patches, container.toml) sha256 "
                f"{short(prov['stack_recipe_sha256'])} in the record, {short(flavour.recipe_sha256)} here"]
    return []


MAX_PACKAGE_LINES = 20


def environment_drift(was: dict, now: dict) -> list[str]:
    """A site's environment (runtime modules), the record's against the one loaded now on the first
    host: modules, the contents of their files and sourced scripts, Python, packages."""
    if now.get("environment_fingerprint") is None:
        return ["environment: cannot be read before the batch job starts; rerun inside an allocation (salloc) to "
                "compare it with the record's"]
    if was.get("environment_fingerprint") == now["environment_fingerprint"]:
        return []
    lines = [*module_drift(was.get("modules_loaded") or [], now["modules_loaded"])]
    old_files, files = was.get("environment_files") or {}, now["environment_files"] or {}
    lines += [f"file {path}: sha256 {short(old_files[path])} in the record, {short(files[path])} now"
              for path in sorted(set(old_files) & set(files)) if old_files[path] != files[path]]
    if was.get("python_version") != now["python_version"]:
        lines.append(f"python: {was.get('python_version')} in the record, {now['python_version']} now")
    packages = version_drift("package", was.get("stack_packages") or {}, now["stack_packages"])
    more = len(packages) - MAX_PACKAGE_LINES
    lines += packages[:MAX_PACKAGE_LINES] + ([f"... and {more} more package differences"] if more > 0 else [])
    return lines or [f"environment: sha256 {short(was.get('environment_fingerprint'))} in the record, "
                     f"{short(now['environment_fingerprint'])} now (its modules were found in other files)"]


def module_drift(was: list[str], now: list[str]) -> list[str]:
    """Modules by name (what comes before the version), e.g. PyTorch/2.1 -> PyTorch/2.3."""
    def by_name(loaded):
        return {module.rsplit("/", 1)[0]: module.rsplit("/", 1)[-1] if "/" in module else "(no version)"
                for module in loaded}

    return version_drift("module", by_name(was), by_name(now))


def key_drift(was: dict, now: dict, gone, new, changed) -> list[str]:
    """A line per key whose value differs, by name: gone(key) where only the record has it, new(key) where
    only now has it, changed(key) where both have it with different values."""
    lines = []
    for name in sorted(set(was) | set(now)):
        if name not in now:
            lines.append(gone(name))
        elif name not in was:
            lines.append(new(name))
        elif was[name] != now[name]:
            lines.append(changed(name))
    return lines


def version_drift(kind: str, was: dict, now: dict) -> list[str]:
    return key_drift(was, now, lambda name: f"{kind} {name}: {was[name]} in the record, none now",
                     lambda name: f"{kind} {name}: not in the record, {now[name]} now",
                     lambda name: f"{kind} {name}: {was[name]} in the record, {now[name]} now")


def recorded_flavour(record: dict) -> str:
    """The flavour of the stack that ran (records before flavours ran the cpu one)."""
    prov = record["provenance"]
    return prov.get("stack_flavour") or prov.get("image_flavour") or "cpu"


def image_drift(record: dict, req: RunRequest, checked: Checked) -> list[str]:
    was = record["provenance"].get("image_sha256")
    if checked.runtime.name == "local" and not was:
        return []  # no image on either side
    env = prepare(req, checked)
    now = env.provenance.get("image_sha256")
    if now == was:
        return []
    return [f"image: sha256 {short(was)} in the record, {short(now)} here ({env.provenance.get('image')}, "
            f"runtime {checked.runtime.name})"]


def git_drift(prov: dict, now: dict) -> list[str]:
    was_commit, commit = prov.get("git_commit"), now["git_commit"]
    if was_commit != commit:
        return [f"suite checkout: commit {short(was_commit)} in the record, {short(commit)} here"]
    if commit is None:
        return ["suite checkout: neither the record's suite nor this one is a git checkout; "
                "the code cannot be compared"]
    if prov.get("git_dirty") and "git_diff_sha256" not in prov:
        return ["suite checkout: the record's had uncommitted changes that it does not identify (schema 1); "
                "this checkout cannot be checked against them"]
    was, diff = prov.get("git_diff_sha256"), now["git_diff_sha256"]
    if was == diff:
        return []
    if not was:
        return ["suite checkout: uncommitted changes here (git diff HEAD), none in the record's"]
    if not diff:
        return [f"suite checkout: the record's had uncommitted changes (diff sha256 {short(was)}), none here"]
    return [f"suite checkout: uncommitted changes differ (diff sha256 {short(was)} in the record, {short(diff)} here)"]


def option_drift(was: dict, now: dict, case: str) -> list[str]:
    """The record's resolved case options against what its arguments resolve to now: a difference is
    a default changed (or an option added or removed) in the case's case.toml."""
    where = f"cases/{case}/case.toml"
    return key_drift(
        was, now, lambda name: f"case option --{name}: {was[name]!r} in the record, no longer an option in {where}",
        lambda name: f"case option --{name}: not in the record, new in {where} (default {now[name]!r})",
        lambda name: f"case option --{name}: {was[name]!r} in the record, {now[name]!r} now from the same "
                     f"arguments (its default in {where} changed)")


def world_drift(was: dict, checked: Checked) -> list[str]:
    world = checked.worlds[0]
    before, now = sorted(was["slots"].values()), sorted(h.slots for h in world.hosts)
    if before == now:
        return []

    def show(counts: list[int]) -> str:
        return str(counts[0]) if len(set(counts)) == 1 else "/".join(map(str, counts))

    return [f"devices per node: {show(before)} in the record, {show(now)} from {world.source}"]


def device_kind(gpus: list[dict]) -> str:
    if not gpus:
        return "cpu (no GPU)"
    return "cuda (" + ", ".join(f"{n} x {name}" for name, n in Counter(g.get("name") for g in gpus).items()) + ")"


def device_drift(record: dict, checked: Checked) -> list[str]:
    """Device type and GPUs per node of the record's first host against this host's: only where the
    processes run here (local scheduler); remote hosts show theirs in the new record."""
    first = first_host_info(record)
    if checked.scheduler.name != "local" or "gpus" not in first:
        return []
    was, now = device_kind(first["gpus"]), device_kind(host_info()["gpus"])
    return [] if was == now else [f"device type: {was} per node in the record, {now} here"]


def notes(record: dict, checked: Checked) -> list[str]:
    """Differences that do not change what is measured, or that a rerun does not restore."""
    world, execution, lines = checked.worlds[0], record["execution"], []
    if world.hostnames != record["world"]["hosts"]:
        lines.append(f"hosts {', '.join(world.hostnames)} from {world.source} (the record's: "
                     f"{', '.join(record['world']['hosts'])})")
    if checked.scheduler.name != execution["scheduler"]:
        lines.append(f"scheduler {checked.scheduler.name} (the record's: {execution['scheduler']})")
    was, now = record["provenance"].get("environment", {}), recorded_env(os.environ)
    changed = [f"{k}={was.get(k, '(unset)')} in the record, {now.get(k, '(unset)')} here"
               for k in sorted(set(was) | set(now))
               if was.get(k) != now.get(k) and MASK not in (was.get(k), now.get(k))]
    if changed:
        lines.append("environment not restored: " + "; ".join(changed)[:600])
    return lines + nccl_conf_drift(record, checked) + site_env_drift(execution, checked)


def nccl_conf_drift(record: dict, checked: Checked) -> list[str]:
    """NCCL's configuration files on the record's first host against this host's, where the processes run here
    (older records do not say)."""
    first = first_host_info(record)
    if checked.scheduler.name != "local" or "nccl_conf" not in first:
        return []
    was, now = first["nccl_conf"], nccl_conf()
    return [] if was == now else [f"NCCL's files: {nccl_files_text(was)} in the record, {nccl_files_text(now)} here"]


def site_env_drift(execution: dict, checked: Checked) -> list[str]:
    """The cluster profile's [env] as applied now against the record's (older records do not say)."""
    was, now = execution.get("cluster_env"), masked_env(checked.site_env)
    if was is None or was == now:
        return []
    moved = [f"{k}={was.get(k, '(unset)')} in the record, {now.get(k, '(unset)')} now"
             for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
    return ["the cluster profile's [env] differs: " + "; ".join(moved)[:600]]


# --- after the run ----------------------------------------------------------------------------------

def comparison(old_path: Path, new_path: Path, tolerance: float) -> str:
    """The `compare` verdict of the new record (B) against the original (A)."""

    def warn(message: str) -> None:
        print(message, file=sys.stderr)

    old, new = load_point(old_path, warn), load_point(new_path, warn)
    if old is None or new is None:
        which = "the original record" if old is None else "the rerun"
        return f"no comparison with the original: {which} has no throughput (failed)"
    row = judge(Row((new.case, new.cluster, new.stack, new.devices), old, new), tolerance)
    systems = systems_line(row)
    return (f"\n== rerun {new.record['run_id']} (B) against the original {old.record['run_id']} (A):\n"
            + format_rows([row]) + (f"\n{systems}" if systems else ""))
