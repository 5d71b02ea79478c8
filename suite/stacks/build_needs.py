"""What a stack's post-install.sh needs of the host that builds the stack locally (the top of its container.toml,
`build_needs`), looked for before anything is downloaded: a compiler pip cannot install, `patch`, the Python headers
of the interpreter that makes the stack. Without this, a host that lacks one learns of it minutes later, deep in a
build log (Horovod's CMake: "Python.h: No such file or directory"; post-install.sh: "patch: command not found")."""

import os
import shutil
import sys
import sysconfig
from pathlib import Path

# a need: (the variable that names the program where a build reads one, the commands looked for on PATH without it)
COMMANDS = {
    "c++": ("CXX", ("c++", "g++", "clang++")),
    "cc": ("CC", ("cc", "gcc", "clang")),
    "make": (None, ("make", "gmake")),
    "patch": (None, ("patch",)),
}
PYTHON_HEADERS = "python-headers"
PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"  # a local stack's, which is the runner's version
NEEDS = (*COMMANDS, PYTHON_HEADERS)
DESCRIBED = {"c++": "a C++ compiler (CXX, or c++, g++ or clang++ on PATH)",
             "cc": "a C compiler (CC, or cc, gcc or clang on PATH)", "make": "make", "patch": "patch"}
# the packages that give each need on Debian and Ubuntu, and on Fedora, RHEL and their rebuilds
DEBIAN = {"c++": "g++", "cc": "gcc", "make": "make", "patch": "patch"}
FEDORA = {"c++": "gcc-c++", "cc": "gcc", "make": "make", "patch": "patch", PYTHON_HEADERS: "python3-devel"}


def headers_dir() -> Path:
    """Where the interpreter that makes a local stack (this one: the stack's venv is made from it) keeps Python.h."""
    return Path(sysconfig.get_paths()["include"])


def lacking(needs, environ=os.environ, include: Path | None = None) -> list[str]:
    """The needs this host does not meet (commands looked for on environ's PATH), in the order given."""
    return [need for need in needs if not _met(need, environ, include or headers_dir())]


def _met(need: str, environ, include: Path) -> bool:
    if need == PYTHON_HEADERS:
        return (include / "Python.h").is_file()
    variable, commands = COMMANDS[need]
    named = (environ.get(variable) or "").split()[:1] if variable else []  # a build takes it, and no other
    return any(shutil.which(command, path=environ.get("PATH")) for command in named or commands)


def described(missing: list[str], include: Path | None = None) -> str:
    """The missing needs in words."""
    return ", ".join(f"the headers of {PYTHON} (no Python.h in {include or headers_dir()})"
                     if need == PYTHON_HEADERS else DESCRIBED[need] for need in missing)


def installs(missing: list[str]) -> str:
    """The commands that install the missing needs on the common distributions."""
    debian = [f"{PYTHON}-dev" if need == PYTHON_HEADERS else DEBIAN[need] for need in missing]
    fedora = [FEDORA[need] for need in missing]
    return f"apt install {' '.join(debian)} on Debian, Ubuntu; dnf install {' '.join(fedora)} on Fedora, RHEL"


def refusal(stack_id: str, missing: list[str], include: Path | None = None) -> str:
    """One line naming what is missing, the packages that give it and the ways around a local build."""
    return (f"stack {stack_id}: its local build (post-install.sh) needs what this host lacks: "
            f"{described(missing, include)}; install them ({installs(missing)}), or run an image of the stack "
            "(RUNTIME=apptainer or docker) or the site's own framework (RUNTIME=modules)")
