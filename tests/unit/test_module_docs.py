"""Every module and folder of suite/ says what it is in a docstring, and no two modules open with the same
line: a name and its first line tell which layer a module is in and what it does."""

import ast
from collections import defaultdict
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "suite"


def first_line(path: Path) -> str | None:
    """The first line of a module's docstring, None where it has none."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else None


def modules_without_a_docstring(root: Path) -> list[str]:
    return [str(p.relative_to(root.parent)) for p in sorted(root.rglob("*.py")) if first_line(p) is None]


def shared_first_lines(root: Path) -> dict[str, list[str]]:
    """First docstring line -> the modules that open with it, where more than one does."""
    found = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if (line := first_line(path)) is not None:
            found[line].append(str(path.relative_to(root.parent)))
    return {line: where for line, where in found.items() if len(where) > 1}


def test_every_suite_module_and_folder_has_a_docstring():
    folders = [p for p in SUITE.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert all((folder / "__init__.py").exists() for folder in folders), folders
    assert modules_without_a_docstring(SUITE) == []


def test_no_two_suite_modules_open_with_the_same_docstring_line():
    assert shared_first_lines(SUITE) == {}


def test_the_checks_find_a_module_without_a_docstring_and_two_that_share_a_first_line(tmp_path):
    root = tmp_path / "suite"
    (root / "a").mkdir(parents=True)
    (root / "a" / "__init__.py").write_text('"""Folder a."""\n')
    (root / "a" / "run.py").write_text('"""`suite run`: runs.\n\nMore."""\n')
    (root / "b.py").write_text('"""`suite run`: runs."""\nimport os\n')
    (root / "c.py").write_text("import os\n")
    assert modules_without_a_docstring(root) == ["suite/c.py"]
    assert shared_first_lines(root) == {"`suite run`: runs.": ["suite/a/run.py", "suite/b.py"]}
