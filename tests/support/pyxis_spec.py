"""A written specification of the srun options pyxis adds (https://github.com/NVIDIA/pyxis, its wiki's
"Usage": what `srun --help` lists with pyxis loaded) and of CSCS's environment definition files
(`srun --environment=FILE.toml`), with a checker for one srun argv and one EDF; and `srun-shim`, an
`srun` for the tests' real SLURM, which has no pyxis: it checks each line against this specification,
logs it, strips the container options and runs the real srun with the rest.

    python tests/support/pyxis_spec.py srun-shim ARGS...   (env: PYXIS_SHIM_REAL_SRUN, PYXIS_SHIM_LOG)"""

import json
import os
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PATH = r"/[^,:\s]*"  # an absolute path that a comma-separated SRC:DST list can carry
NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # an environment variable's name
MOUNT = rf"{PATH}:{PATH}(?::[a-z=-]+(?:\+[a-z=-]+)*)?"  # SRC:DST[:FLAGS], flags joined by +
MOUNT_FLAGS = {"ro", "rw", "private", "rprivate", "slave", "rslave", "shared", "rshared", "nosuid", "nodev",
               "noexec", "bind", "rbind", "x-create=file", "x-create=dir", "x-create=auto"}
REFERENCE = r"(?:[\w.-]+@)?(?:[\w.-]+(?::\d+)?#)?[\w./-]+(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?"

# option -> (value grammar as pyxis's help writes it, regular expression of the whole value; None: a flag)
OPTIONS = {
    "--container-image": ("[USER@][REGISTRY#]IMAGE[:TAG]|PATH", rf"{PATH}\.(?:sqsh|squashfs)|{REFERENCE}"),
    "--container-name": ("NAME[:FLAGS] (FLAGS: auto, create, exec, no_create, no_exec)",
                         r"[A-Za-z0-9][\w.-]*(?::(?:auto|create|exec|no_create|no_exec))?"),
    "--container-mounts": ("SRC:DST[:FLAGS][,SRC:DST...] (FLAGS joined by +)",
                           rf"{MOUNT}(?:,{MOUNT})*"),
    "--container-workdir": ("PATH", PATH),
    "--container-env": ("NAME[,NAME...]", rf"{NAME}(?:,{NAME})*"),
    "--container-save": ("PATH", PATH),
    "--container-mount-home": ("", None),
    "--no-container-mount-home": ("", None),
    "--container-remap-root": ("", None),
    "--no-container-remap-root": ("", None),
    "--container-entrypoint": ("", None),
    "--no-container-entrypoint": ("", None),
    "--container-writable": ("", None),
    "--container-readonly": ("", None),
    "--environment": ("FILE.toml|NAME (CSCS Container Engine)", r"/[^\s]*\.toml|[\w.-]+"),
}
EXCLUSIVE = [("--container-mount-home", "--no-container-mount-home"), ("--container-remap-root",
             "--no-container-remap-root"), ("--container-entrypoint", "--no-container-entrypoint"),
             ("--container-writable", "--container-readonly"), ("--container-image", "--environment")]
# An EDF's keys (CSCS "Container Engine" docs): key -> what it must be
EDF_KEYS = {"image": str, "base_environment": (str, list), "mounts": list, "workdir": str, "writable": bool,
            "entrypoint": bool, "env": dict, "annotations": dict}


def container_options(argv: list[str]) -> tuple[dict[str, str | None], int]:
    """The container options among srun's own (those before the program), and where the program starts."""
    found, index = {}, 0
    while index < len(argv) and argv[index].startswith("-"):
        name, _, value = argv[index].partition("=")
        if name in OPTIONS:
            found[name] = value if "=" in argv[index] else None
        index += 1
    return found, index


def check_srun(argv: list[str], must_exist: bool = False) -> list[str]:
    """What is wrong with one srun argv (argv[0] is srun) as pyxis reads it; [] when nothing.
    must_exist: mount sources and an image file must be there (on the host that runs the step)."""
    problems = []
    for arg in argv[1:]:
        if not arg.startswith("-"):
            break
        name, eq, value = arg.partition("=")
        if name.startswith(("--container", "--no-container")) and name not in OPTIONS:
            problems.append(f"{name}: not an option of pyxis")
    found, program = container_options(argv[1:])
    if found and program + 1 >= len(argv):
        problems.append("no program after the container options")
    for name, value in found.items():
        grammar, pattern = OPTIONS[name]
        if pattern is None and value is not None:
            problems.append(f"{name} takes no value, got {value!r}")
        elif pattern is not None and (value is None or not re.fullmatch(pattern, value)):
            problems.append(f"{name}={value}: not {grammar}")
    for a, b in EXCLUSIVE:
        if a in found and b in found:
            problems.append(f"{a} and {b} together")
    if found and "--container-image" not in found and "--environment" not in found and "--container-name" not in found:
        problems.append("container options without --container-image, --environment or --container-name")
    problems += flag_problems((found.get("--container-mounts") or "").split(","))
    if must_exist:
        for mount in filter(None, (found.get("--container-mounts") or "").split(",")):
            if not Path(mount.split(":")[0]).exists():
                problems.append(f"mount source {mount.split(':')[0]} does not exist")
        image = found.get("--container-image") or ""
        if image.startswith("/") and not Path(image).is_file():
            problems.append(f"image file {image} does not exist")
        if (found.get("--environment") or "").startswith("/"):
            problems += check_edf(Path(found["--environment"]), must_exist)
    return problems


def flag_problems(mounts) -> list[str]:
    return [f"mount {m}: flag {flag!r} is not one of pyxis's" for m in mounts
            if isinstance(m, str) and m.count(":") == 2
            for flag in m.split(":")[2].split("+") if flag not in MOUNT_FLAGS]


def check_edf(path: Path, must_exist: bool = False) -> list[str]:
    try:
        edf = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [f"EDF {path}: {exc}"]
    problems = [f"EDF {path}: unknown key {key}" for key in edf if key not in EDF_KEYS]
    problems += [f"EDF {path}: {key} must be a {EDF_KEYS[key]}" for key, value in edf.items()
                 if key in EDF_KEYS and not isinstance(value, EDF_KEYS[key])]
    if "image" not in edf and "base_environment" not in edf:
        problems.append(f"EDF {path}: no image")
    mount = re.compile(MOUNT)
    problems += [f"EDF {path}: mount {m!r} is not SRC:DST[:FLAGS]" for m in edf.get("mounts", [])
                 if not isinstance(m, str) or not mount.fullmatch(m)]
    problems += flag_problems(edf.get("mounts", []))
    if "workdir" in edf and not re.fullmatch(PATH, edf["workdir"]):
        problems.append(f"EDF {path}: workdir {edf['workdir']!r} is not an absolute path")
    problems += [f"EDF {path}: env {k} must be a string" for k, v in edf.get("env", {}).items()
                 if not isinstance(v, str)]
    if must_exist:
        problems += [f"EDF {path}: mount source {m.split(':')[0]} does not exist" for m in edf.get("mounts", [])
                     if isinstance(m, str) and not Path(m.split(":")[0]).exists()]
    return problems


def stripped(argv: list[str]) -> list[str]:
    """The srun argv without pyxis's options and --environment: what runs on a SLURM without pyxis."""
    _, program = container_options(argv[1:])
    return [argv[0], *(a for a in argv[1:program + 1] if a.partition("=")[0] not in OPTIONS), *argv[program + 1:]]


PYXIS_HELP = "\n".join(f"      {name}{'=' + grammar if OPTIONS[name][1] else ''}  [pyxis]" for name, (grammar, _)
                       in OPTIONS.items())


def shim(argv: list[str]) -> int:
    real = os.environ["PYXIS_SHIM_REAL_SRUN"]
    if argv[1:] == ["--help"]:
        os.system(f"{real} --help")  # noqa: S605 (a test helper: the real srun's help, then pyxis's lines)
        print(f"Options provided by plugins:\n{PYXIS_HELP}", flush=True)
        return 0
    problems = check_srun(argv, must_exist=True)
    if os.environ.get("PYXIS_SHIM_LOG"):
        with open(os.environ["PYXIS_SHIM_LOG"], "a") as log:
            log.write(json.dumps({"argv": argv, "problems": problems}) + "\n")
    if problems:
        print(f"srun (pyxis shim): {'; '.join(problems)}", file=sys.stderr)
        return 2
    command = stripped(argv)
    os.execv(real, [real, *command[1:]])
    return 127


if __name__ == "__main__":
    if sys.argv[1:2] != ["srun-shim"]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(shim(["srun", *sys.argv[2:]]))
