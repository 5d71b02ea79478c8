"""The layers of suite/ as folders, in one strict order from the bottom up: each folder imports only the
folders below it, never one above it or beside it, so no two folders import each other (README.md,
"Layout"). The one way up is plugin loading by name: suite/execution/plugins.py imports a runtime, launcher
or scheduler module with importlib, given its name; no module of a folder below the plugins does otherwise."""

import ast
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "suite"

# Bottom to top, as README.md's table lists them; folders of one layer do not import each other.
LAYERS = (
    ("instack", "base"),  # the standard library only: code inside the stacks, and what the runner's layers share
    ("inputs",),
    ("records",),
    ("analysis",),
    ("stacks",),
    ("execution",),
    ("runtimes", "launchers", "schedulers"),
    ("commands",),
)
LOADS_BY_NAME = "suite/execution/plugins.py"  # the one module below the plugins that may load them (importlib)


def below(folder: str) -> set[str]:
    """The folders of the layers under `folder`'s: those it may import (itself aside)."""
    level = next(i for i, layer in enumerate(LAYERS) if folder in layer)
    return {name for layer in LAYERS[:level] for name in layer}


MAY_IMPORT = {folder: below(folder) for layer in LAYERS for folder in layer}


def suite_imports(path: Path) -> set[str]:
    """The suite modules a file imports, as dotted names (`from suite.x import y` gives suite.x.y too)."""
    return suite_imports_from(ast.parse(path.read_text()))


def suite_imports_from(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
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


def imports_up_or_beside(folder: str, files: list[Path]) -> list[str]:
    """`file imports name` for each import of `files` (modules of `folder`) of a folder not below it."""
    return [f"{path.name} imports {name}" for path in files for name in sorted(suite_imports(path))
            if (target := folder_of(name)) and target != folder and target not in MAY_IMPORT[folder]]


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_folder_imports_only_the_layers_below(folder):
    wrong = imports_up_or_beside(folder, sorted((SUITE / folder).rglob("*.py")))
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


def test_an_import_up_or_beside_is_reported_and_so_no_two_folders_import_each_other(tmp_path):
    files = {"run.py": "from suite.runtimes import local\n",  # execution loads plugins by name only
             "torchrun.py": "import suite.schedulers.slurm\n",  # beside: neither plugin folder imports another
             "slurm.py": "from suite.execution.plan import Plan\n",
             "stats.py": "from suite.instack import probe\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert imports_up_or_beside("execution", [tmp_path / "run.py"]) == ["run.py imports suite.runtimes.local"]
    assert imports_up_or_beside("launchers", [tmp_path / "torchrun.py"]) == [
        "torchrun.py imports suite.schedulers.slurm"]
    assert imports_up_or_beside("schedulers", [tmp_path / "slurm.py"]) == []
    assert imports_up_or_beside("base", [tmp_path / "stats.py"]) == ["stats.py imports suite.instack.probe"]
    assert imports_up_or_beside("inputs", [tmp_path / "stats.py"]) == []
    assert imports_up_or_beside("instack", [tmp_path / "slurm.py"]) == [
        "slurm.py imports suite.execution.plan", "slurm.py imports suite.execution.plan.Plan"]


def test_the_order_is_the_readmes_table():
    readme = (SUITE.parent / "README.md").read_text()
    table = readme.split("each folder imports only the folders below it")[1].split("\n\n")[1]
    rows = [line.split("|")[1] for line in table.splitlines()[2:]]
    assert [tuple(name.strip(" `/") for name in row.split(",")) for row in rows] == list(LAYERS)


def imports_modules_by_name(path: Path) -> bool:
    """Whether a file can import a module from its name: it imports importlib (or a part of it) or calls
    __import__. importlib.metadata, which reads package versions, does not count."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and node.id == "__import__":
            return True
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [f"{node.module}.{a.name}" if node.module == "importlib" else node.module for a in node.names]
                   if isinstance(node, ast.ImportFrom) and node.module else [])
        if any(m.split(".")[0] == "importlib" and m != "importlib.metadata" for m in modules):
            return True
    return False


def test_loading_by_name_is_told_from_reading_package_versions(tmp_path):
    cases = {"import importlib\n": True, "from importlib import import_module\n": True,
             "import importlib.util\n": True, "x = __import__('os')\n": True,
             "from importlib import metadata\n": False, "from importlib.metadata import version\n": False}
    for i, (text, loads) in enumerate(cases.items()):
        (tmp_path / f"m{i}.py").write_text(text)
        assert imports_modules_by_name(tmp_path / f"m{i}.py") is loads, text


def test_plugin_loading_by_name_is_the_one_way_up():
    below_plugins = below("runtimes")
    loaders = [str(p.relative_to(SUITE.parent)) for folder in sorted(below_plugins)
               for p in sorted((SUITE / folder).rglob("*.py")) if imports_modules_by_name(p)]
    assert loaders == [LOADS_BY_NAME]


def test_tools_and_benchmarks_use_the_layers_not_the_commands():
    """A tool (tools/) or a bench (benchmarks/) that needs the suite's code imports it from the layers; a
    command is reached as users reach it, `python -m suite COMMAND`."""
    wrong = [f"{path.relative_to(SUITE.parent)} imports {name}"
             for top in ("tools", "benchmarks") for path in sorted((SUITE.parent / top).rglob("*.py"))
             for name in sorted(suite_imports(path)) if name.startswith(("suite.commands", "suite.cli"))]
    assert wrong == []
    old_tool = ast.parse("from suite.commands.predict import validation_table\n")  # what tools/ once did
    assert "suite.commands.predict" in suite_imports_from(old_tool)


def test_test_files_have_names_of_their_own():
    """pytest imports test modules by their file name (tests/ has no packages): two test files of one name in
    unit/ and integration/ stop the whole run at collection."""
    names = [p.name for p in sorted((SUITE.parent / "tests").rglob("test_*.py"))]
    assert sorted({n for n in names if names.count(n) > 1}) == []
