"""The layers of suite/ as folders: each folder imports only the folders below it (suite/__init__.py
and the folders' own docstrings say what each holds)."""

import ast
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "suite"

# folder -> the suite folders its modules may import (itself always allowed)
MAY_IMPORT = {
    "instack": set(),
    "base": {"instack"},
    "inputs": {"base", "instack"},
    "stacks": {"base", "instack", "inputs"},
    "records": {"base", "instack", "inputs"},
    "analysis": {"base", "instack", "inputs", "records"},
    "execution": {"base", "instack", "inputs", "records", "analysis", "stacks", "runtimes", "launchers",
                  "schedulers"},
    "runtimes": {"base", "instack", "inputs", "records", "stacks", "execution"},
    "launchers": {"base", "instack", "inputs", "execution"},
    "schedulers": {"base", "instack", "inputs", "execution"},
    "commands": {"base", "instack", "inputs", "records", "analysis", "stacks", "execution", "runtimes",
                 "launchers", "schedulers", "commands"},
}


def suite_imports(path: Path) -> set[str]:
    """The suite modules a file imports, as dotted names (`from suite.x import y` gives suite.x.y too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("suite")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("suite"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def folder_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 2 and (SUITE / parts[1]).is_dir() else None


def test_every_folder_has_a_rule():
    folders = {p.name for p in SUITE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(MAY_IMPORT)


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_folder_imports_only_the_layers_below(folder):
    wrong = []
    for path in sorted((SUITE / folder).rglob("*.py")):
        for name in suite_imports(path):
            target = folder_of(name)
            if target and target != folder and target not in MAY_IMPORT[folder]:
                wrong.append(f"{path.relative_to(SUITE.parent)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_instack_uses_the_standard_library_only():
    """Case scripts import suite.instack inside framework stacks that lack the runner's packages; the
    telemetry sampler's psutil/pynvml are imported where available, inside functions."""
    stdlib = set(sys.stdlib_module_names) | {"suite", "tomli"}
    wrong = []
    for path in sorted((SUITE / "instack").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module level only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            wrong += [f"{path.name}: {n}" for n in names if n.split(".")[0] not in stdlib]
    assert not wrong, wrong


def test_the_layer_rule_catches_an_import_back_up(tmp_path):
    """The check itself: an instack module importing execution would be reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from suite.execution.run import run\n")
    assert folder_of("suite.execution.run.run") == "execution"
    assert "execution" not in MAY_IMPORT["instack"]
    assert "suite.execution.run" in suite_imports(bad)
