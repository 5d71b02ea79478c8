"""Every repository path that a comment, a docstring or a document names exists: the comments and
docstrings of .py files, the comments of shell scripts and Makefiles, and the whole text of .md files.

A path is a top folder of the repository (TOP) followed by a name; `../` in front (a link from docs/)
is dropped. A path with a placeholder (`<name>`, `{cpu,cuda}`, `*`, a word in capitals such as NAME)
stands for any name there and must match at least one path. Paths under a folder .gitignore names
(build outputs, run folders) are made by the suite, and EXAMPLES are files the docs tell a user to
make; neither is looked for."""

import ast
import io
import os
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = ("benchmarks", "cases", "containers", "docs", "hostfiles", "suite", "tests", "tools")
PATH = re.compile(r"(?<![\w./$~-])(?:\.\./)*((?:" + "|".join(TOP) + r")/[\w./<>{},*@+-]*)")
PLACEHOLDER = re.compile(r"<[^>]*>|\{[^}]*\}|\b[A-Z][A-Z_]{2,}\b")
EXAMPLES = {
    "hostfiles/mycluster.toml": "README and docs/clusters.md: the copy of a profile a user makes for a cluster",
    "hostfiles/mysite.toml": "README: the copy of the modules example a user makes for a site",
    "suite/runtimes/enroot.py": "docs/plugins.md: the image runtime of its worked example, one file a site adds",
}


def ignored_folders(root: Path) -> list[str]:
    """The folders .gitignore names from the top (`/runs/`), as relative paths with a slash at the end."""
    lines = (root / ".gitignore").read_text().splitlines() if (root / ".gitignore").exists() else []
    return [line.strip().lstrip("/") for line in lines if line.strip().startswith("/") and line.strip().endswith("/")]


def scanned_files(root: Path) -> list[Path]:
    skip = set(ignored_folders(root))
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root).as_posix()
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and not d.endswith(".egg-info")
                         and f"{'' if here == '.' else here + '/'}{d}/" not in skip and d != "reports")
        found += [Path(folder) / f for f in sorted(files) if f.endswith((".py", ".sh", ".md")) or f == "Makefile"]
    return found


def python_comments_and_docstrings(text: str) -> list[str]:
    found = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    nodes = (n for n in ast.walk(ast.parse(text))
             if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))
    return found + [doc for n in nodes if (doc := ast.get_docstring(n, clean=False))]


def prose(path: Path) -> list[str]:
    """The parts of a file that talk about the repository, not the code itself."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        return python_comments_and_docstrings(text)
    if path.suffix == ".md":
        return [text]
    return [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]  # shell, Makefile


def exists(root: Path, named: str) -> bool:
    if (root / named).exists():
        return True
    if not PLACEHOLDER.search(named) and "*" not in named:
        return False
    pattern = PLACEHOLDER.sub("*", named).rstrip("/")
    return any(root.glob(pattern))


def missing_paths(root: Path) -> list[str]:
    """`file: path` for each path named in a file's prose that is not in the repository."""
    outputs = ignored_folders(root)
    missing = []
    for path in scanned_files(root):
        for text in prose(path):
            for match in PATH.finditer(text):
                named = match.group(1).rstrip(".,:;")
                if named in EXAMPLES or named.startswith(tuple(outputs)) or exists(root, named):
                    continue
                missing.append(f"{path.relative_to(root)}: {named}")
    return sorted(set(missing))


def test_every_path_named_in_comments_docstrings_and_docs_exists():
    assert missing_paths(ROOT) == []


@pytest.mark.parametrize("named, found", [
    ("suite/gone.py", False), ("tests/unit/test_x.py", True), ("cases/<name>/case.toml", True),
    ("cases/<name>/data.py", False), ("containers/{cpu,cuda}/x.lock", False), ("hostfiles/NAME.toml", True),
    ("docs/", True)])
def test_a_named_path_that_is_not_there_is_reported_and_placeholders_stand_for_any_name(tmp_path, named, found):
    for made in ("tests/unit/test_x.py", "cases/tf/case.toml", "hostfiles/a.toml", "docs/a.md", "containers/a"):
        (tmp_path / made).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / made).write_text("")
    (tmp_path / ".gitignore").write_text("/containers/build/\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "x.py").write_text(f'"""Reads {named}, writes containers/build/out.sif."""\n'
                                             f'x = "suite/not-prose.py"  # see {named}\n')
    expected = [] if found else [f"tools/x.py: {named}"]
    assert missing_paths(tmp_path) == expected
