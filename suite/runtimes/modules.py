"""Runs a case on the framework a site already provides: its environment modules (Lmod or
Environment Modules), scripts sourced after them (a venv's activate, as JSC's sc_venv_template
has), and the Python that results; or, with no modules, a plain existing environment
(PYTHON=/path/to/venv/bin/python).

What to load comes from the cluster profile's [modules] table, or from MODULES, SOURCE and PYTHON,
which replace the profile's `load`, `source` and `python` where given. Every program of the case
becomes `bash -c '<loading>; exec "$@"' modules-env PROGRAM ARGS`, so a process started here, over
ssh or as an srun step loads the same way on its own host, and a batch job's script carries the same
lines before its runner (job_lines). The configured Python runs the case, torchrun and horovodrun run
as `python -m` modules: a venv on top of a site's Python has no scripts of the packages it inherits.

Before launch one probe loads the same way on the run's first host (through the scheduler) and
either refuses in one line (no module system, a module that does not load, with the module system's
own error, no Python) or reports the environment. Its fingerprint plays the part of a stack's lock:
sha256 over the modules as loaded (LOADEDMODULES, what `module list` shows), the contents of their
modulefiles and of the sourced scripts, the Python version and every package with its version
(importlib.metadata in sys.path order: pip list's list, without needing pip in the environment).
The probe also reports the environment as the loading leaves it: the variables that steer frameworks it set or
changed (a module's `setenv NCCL_SOCKET_IFNAME ib0`, which wins over the run's own value, since every
process loads after its environment is set) are recorded, and the interfaces they name are checked
on every host before launch (suite/execution/run.py). The facts launchers read (torch's version, what
Horovod was built with) are read once per fingerprint and kept beside the local stacks."""

import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from suite.base import paths
from suite.base.env_policy import masked_env, steers_frameworks
from suite.base.errors import UsageError
from suite.base.jsonfile import write_json_atomic
from suite.execution.plan import StackEnv, StackRequest
from suite.execution.plugins import Setting, output_here, run_on_first_host

PROFILE = {
    "init": Setting(str, None, "the module system's shell init file (default: found on each host: "
                    "$MODULESHOME/init/bash, then Lmod's and Environment Modules' usual places)"),
    "modulepath": Setting(list, None, "folders of modulefiles to `module use` (default: $MODULEPATH where the run "
                          "starts, so every host sees the modules this shell sees)"),
    "purge": Setting(bool, True, "`module purge` before loading, so every host starts from the same modules"),
    "load": Setting(list, [], "modules to load, in order, e.g. [\"Stages/2024\", \"GCC\", \"PyTorch\"] (MODULES "
                    "replaces them)"),
    "source": Setting(list, [], "scripts sourced after loading, e.g. a venv's activate.sh (SOURCE replaces them)"),
    "python": Setting(str, None, "the Python that runs the cases (PYTHON replaces it; default: the first python3 on "
                      "PATH once loaded)"),
}
INITS = ("${MODULESHOME:-/nonexistent}/init/bash", "/usr/share/lmod/lmod/init/bash", "/usr/share/modules/init/bash")
NAME = "modules-env"  # $0 of the loading shell, as `ps` shows it


@dataclass(frozen=True)
class Setup:
    """What every process loads before its program: plain values from the profile and the request."""

    init: str | None = None
    modulepath: tuple[str, ...] = ()
    purge: bool = True
    load: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    python: str | None = None

    def describe(self) -> str:
        parts = [f"modules {' '.join(self.load)}" if self.load else "no modules"]
        parts += [f"source {' '.join(self.source)}"] if self.source else []
        return ", ".join(parts)


@dataclass(frozen=True)
class Step:
    shell: str  # one shell command
    refusal: str  # what its failure means before launch, in words ({host}: where; replaced, never str.format-ted,
    # since the words hold the user's module names and paths)
    short: str = ""  # the same in a few words, for a process's log (default: the command failed)
    required: bool = True  # False: its failure is no failure (a module system for scripts alone)

    @property
    def guarded(self) -> str:
        """The command, ending the shell with a short reason where it is required and fails (the
        module system's own error comes before it)."""
        if not self.required:
            return self.shell
        said = shlex.quote(f"{NAME}: {self.short or self.shell + ' failed'} on ") + '"$(hostname)"'
        return f"{self.shell} || {{ echo {said} >&2; exit 1; }}"


def setup_of(want: StackRequest) -> Setup:
    """The profile's [modules] table with the request's values in place of its own."""
    table = want.profile.section("modules") if want.profile else {}
    modulepath = table.get("modulepath")
    if modulepath is None:
        modulepath = [d for d in os.environ.get("MODULEPATH", "").split(":") if d]
    return Setup(init=table.get("init"), modulepath=tuple(modulepath), purge=table.get("purge", True),
                 load=want.modules if want.modules is not None else tuple(table.get("load", [])),
                 source=want.source if want.source is not None else tuple(table.get("source", [])),
                 python=want.python or table.get("python"))


def steps(setup: Setup) -> list[Step]:
    """The loading, one shell command each. The module system is needed where modules are loaded;
    for scripts alone it is set up where found (a script such as sc_venv_template's loads its own)."""
    q = shlex.quote
    found = []
    if setup.load or setup.source:
        found.append(init_step(setup.init, required=bool(setup.load)))
    if setup.load:
        if setup.purge:
            found.append(Step("module purge", "module purge failed on {host}"))
        found += [Step(f"module use {q(d)}", f"module use {d} failed on {{host}}") for d in setup.modulepath]
        found += [Step(f"module load {q(m)}", f"module {m} does not load on {{host}}") for m in setup.load]
    found += [Step(f". {q(s)}", f"sourcing {s} failed on {{host}}") for s in setup.source]
    return found


def init_step(init: str | None, required: bool) -> Step:
    """Source the profile's init file, else find one where `module` is not defined yet."""
    if init:
        quoted = shlex.quote(init)
        return Step(f"[ -r {quoted} ] && . {quoted}", f"no module system on {{host}}: cannot source {init} "
                    "([modules] init)", f"cannot source {init}", required)
    candidates = " ".join(f'"{path}"' for path in INITS)
    shell = (f"type module >/dev/null 2>&1 || for f in {candidates}; do if [ -r \"$f\" ]; then . \"$f\"; break; fi; "
             "done; type module >/dev/null 2>&1")
    where = ", ".join(INITS).replace("${MODULESHOME:-/nonexistent}", "$MODULESHOME")
    return Step(shell, f"no module system found on {{host}} (no `module` command, none of {where}; set the "
                       "profile's [modules] init to the site's init file)", "no module system found", required)


def job_lines(want: StackRequest) -> list[str]:
    """The loading as lines of a batch job's script; then the runner's own Python is shielded from
    the site's (PYTHONPATH of a module), as each step loads again in its own shell."""
    lines = [step.guarded for step in steps(setup_of(want))]
    shield = "unset PYTHONPATH PYTHONHOME  # the runner keeps its own Python; each step loads again"
    return [*lines, shield] if lines else []


def wrapper(setup: Setup) -> tuple[str, ...]:
    """The argv prefix that loads, then runs the program with its arguments (none: nothing to load)."""
    loading = [step.guarded for step in steps(setup)]
    return ("bash", "-c", "; ".join([*loading, 'exec "$@"']), NAME) if loading else ()


# --- the probe on the first host ---------------------------------------------------------------------

PROBE = r'''
import hashlib, json, os, shutil, sys


def packages():
    try:
        from importlib import metadata
        pairs = [(d.metadata["Name"], d.version) for d in metadata.distributions()]
    except ImportError:
        import pkg_resources
        pairs = [(d.project_name, d.version) for d in pkg_resources.working_set]
    found = {}
    for name, version in pairs:
        if name:
            found.setdefault(name.lower(), version)
    return found


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def facts():
    found = {"mpirun": shutil.which("mpirun")}
    try:
        import torch
        found.update(torch_version=torch.__version__, torch_cuda=torch.version.cuda)
    except Exception:
        pass
    try:
        import horovod  # noqa: F401 (only whether it imports)
    except Exception:
        return found
    try:
        import horovod.torch as hvd
        found.update(horovod_torch=True, horovod_gloo=bool(hvd.gloo_built()), horovod_mpi=bool(hvd.mpi_built()),
                     horovod_nccl=bool(hvd.nccl_built()))
    except Exception as exc:
        found.update(horovod_torch=False, horovod_error=("%s: %s" % (type(exc).__name__, exc))[:300])
    return found


modules = [m for m in os.environ.get("LOADEDMODULES", "").split(":") if m]
files = [f for f in os.environ.get("_LMFILES_", "").split(":") if f] + sys.argv[3:]
out = {"python": sys.argv[1], "python_version": "%d.%d.%d" % sys.version_info[:3], "modules": modules,
       "files": {f: digest(f) for f in files}, "packages": packages(),
       "env": dict(os.environ)}
if sys.argv[2] == "facts":
    out["facts"] = facts()
print("@@json " + json.dumps(out))
'''


def probe_steps(setup: Setup, facts: bool) -> list[Step]:
    """The loading, then finding the Python and its report."""
    q = shlex.quote
    if setup.python:
        find = Step(f"[ -x {q(setup.python)} ] && suite_py={q(setup.python)}",
                    f"PYTHON {setup.python} is not an executable file on {{host}}")
    else:
        find = Step("suite_py=$(command -v python3)", f"no python3 on PATH on {{host}} after loading "
                    f"({setup.describe()}): load a module that provides Python, or set PYTHON or [modules] python")
    report = Step(f'"$suite_py" -c {q(PROBE)} "$suite_py" {"facts" if facts else "list"} '
                  + " ".join(q(s) for s in setup.source), "the environment's Python on {host} could not report")
    return [*steps(setup), find, report]


def probe_argv(setup: Setup, facts: bool) -> tuple[str, ...]:
    """One shell that loads as the processes will, then reports: '@@fail N' where step N failed
    (its output before), else '@@json {...}'. It exits 0 either way, so the output comes back."""
    lines = ["exec 2>&1"]
    for index, step in enumerate(probe_steps(setup, facts)):
        failed = f'echo "@@fail {index}"; exit 0' if step.required else "true"
        lines.append(f"echo @@step; {step.shell} || {{ {failed}; }}")
    return ("bash", "-c", "\n".join(lines), NAME)


def read_probe(output: str, setup: Setup, host: str) -> dict:
    """The probe's report, or its refusal in one line (UsageError) with the module system's own words."""
    lines = output.splitlines()
    for at, line in enumerate(lines):
        if line.startswith("@@json "):
            return json.loads(line[len("@@json "):])
        if line.startswith("@@fail "):
            step = probe_steps(setup, False)[int(line.split()[1])]
            begun = max((i for i in range(at) if lines[i] == "@@step"), default=-1) + 1
            said = detail(lines[begun:at])
            raise UsageError(step.refusal.replace("{host}", host) + (f": {said}" if said else ""))
    raise RuntimeError(f"runtime modules: the probe on {host} reported nothing readable: {output.strip()[-300:]!r}")


def detail(lines: list[str]) -> str:
    """The module system's own error, in one line: from its first line naming an error, two lines."""
    said = [line.strip() for line in lines if line.strip()]
    start = next((i for i, line in enumerate(said) if "error" in line.lower()), 0)
    return " ".join(said[start:start + 2])[:300]


def probe(want: StackRequest, setup: Setup, facts: bool = False) -> dict | None:
    """The environment on the run's first host; None where it cannot be read before launch."""
    output = run_on_first_host(want, probe_argv(setup, facts))
    return None if output is None else read_probe(output, setup, want.first_host)


def set_by_loading(found: dict, environ=os.environ) -> dict:
    """The variables steering frameworks that the loading set or changed on the probe's host: the probe's
    values where the runner's environment has none or another (credential-like ones masked). The probe reports
    its whole environment: the site's Python runs it without the suite, so the policy applies here."""
    return masked_env({k: v for k, v in found.get("env", {}).items() if steers_frameworks(k) and environ.get(k) != v})


def sets_text(found: dict) -> str:
    """What the loading sets, by name, as the end of a line ("" where it sets nothing)."""
    names = sorted(set_by_loading(found))
    return f"; the loading sets {', '.join(names)}" if names else ""


def fingerprint(found: dict) -> str:
    """sha256 over what makes the environment: modules as loaded, their files' and the sourced
    scripts' contents, the Python version, every package and version."""
    kept = {key: found[key] for key in ("modules", "files", "python_version", "packages")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def facts_path(digest: str) -> Path:
    return paths.stack_home().parent / "modules" / f"{digest}.json"


def facts_of(want: StackRequest, setup: Setup, digest: str, log) -> dict:
    """torch's version and Horovod's build (Gloo, MPI, NCCL, whether horovod.torch imports), read in
    the environment once per fingerprint: importing them takes seconds."""
    cached = facts_path(digest)
    try:
        return json.loads(cached.read_text())["facts"]
    except (OSError, ValueError, KeyError):
        pass
    found = probe(want, setup, facts=True)
    if found is None:
        return {}
    if fingerprint(found) != digest:
        log("note: runtime modules: the environment changed while it was read; its facts are not kept")
        return found.get("facts", {})
    write_json_atomic(cached, {"fingerprint": digest, "python": found["python"], "facts": found["facts"]})
    return found["facts"]


def prepare(want: StackRequest, log=print) -> StackEnv:
    """Read the environment on the first host and fingerprint it; where the first host cannot be
    reached before launch (a batch job not yet submitted) its own run reads it."""
    setup = setup_of(want)
    found = probe(want, setup)
    if found is None:
        log(f"runtime modules: the environment ({setup.describe()}) cannot be read on {want.first_host} before "
            "launch (a batch job's own run reads it on its first node)")
        return stack_env(want, setup, None, None, {})
    digest = fingerprint(found)
    log(f"runtime modules: {setup.describe()}; python {found['python_version']} at {found['python']}, "
        f"{len(found['packages'])} packages, environment sha256:{digest[:12]}{sets_text(found)}")
    return stack_env(want, setup, found, digest, facts_of(want, setup, digest, log))


def stack_env(want: StackRequest, setup: Setup, found: dict | None, digest: str | None, facts: dict) -> StackEnv:
    python = found["python"] if found else setup.python or "python3"
    found = found or {}
    return StackEnv(
        runtime="modules",
        bin_dir="",  # other programs: by PATH, once loaded
        prefix=wrapper(setup),
        env={"PYTHONPATH": str(paths.ROOT)},
        facts=facts,
        programs={"python": [python], "torchrun": [python, "-m", "torch.distributed.run"],
                  "horovodrun": [python, "-m", "horovod.runner.launch"]},
        provenance={
            "stack": want.stack.name,
            "stack_flavour": None,
            "stack_lock_sha256": digest,
            "environment_fingerprint": digest,
            "modules_loaded": found.get("modules"),
            "environment_files": found.get("files"),
            "python_version": found.get("python_version"),
            "stack_packages": found.get("packages"),
            "environment_set_by_loading": set_by_loading(found) if found else None,
            "stack_location": python,
            "runtime": "modules",
            "image": None,
            "image_sha256": None,
        },
    )


def doctor_lines(cluster, stacks: list[str], flavour: str | None = None) -> list[str]:
    """The profile's environment loaded here: whether it loads, and which frameworks it has."""
    setup = setup_of(StackRequest(None, profile=cluster))
    output = output_here(probe_argv(setup, facts=False))
    try:
        found = read_probe(output or "", setup, "this machine")
    except (UsageError, RuntimeError) as exc:
        return [f"missing: runtime modules: {exc}"]
    packages = found["packages"]
    frameworks = ", ".join(f"{name} {packages[name]}" for name in ("torch", "horovod", "tensorflow", "tf-keras",
                                                                  "tf_keras", "mxnet") if name in packages)
    return [f"ok: runtime modules: {setup.describe()} load here; python {found['python_version']} at {found['python']}"
            f" with {frameworks or 'no framework of the cases'}{sets_text(found)}"]
