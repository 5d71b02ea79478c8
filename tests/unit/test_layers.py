"""The layers of suite/ as folders, in one strict order from the bottom up: each folder imports only the
folders below it, never one above it or beside it, so no two folders import each other (README.md,
"Layout"). The one way up is plugin loading by name: suite/execution/plugins.py imports a runtime, launcher
or scheduler module with importlib, given its name; no module of a folder below the plugins does otherwise."""

import ast
import sys
import textwrap
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


# A command parses and calls (CONTRIBUTING.md, "A command"): what a command module may hold.
CONTRACT_FUNCTIONS = {"add_arguments", "make_request", "run"}
RUN_LINES = 20  # the longest function but add_arguments (options and their help): a call, and what it prints
MODULE_LINES = 80
PRIVATE_HELPERS = 2


def engine_parts(path: Path) -> list[str]:
    """What of a command module is more than parsing and calling, one phrase each; [] where nothing is. The rule:
    at module level only the docstring, imports, UPPER_CASE constants (NAME, HELP, EPILOG, FORMATTER...),
    dataclasses of fields alone (its typed request), the contract's functions and at most PRIVATE_HELPERS
    private ones (`_name`); no function but add_arguments over RUN_LINES lines; the module at most MODULE_LINES.
    A public function, a class with methods or a long run is an engine: it goes into the layers below."""
    text = path.read_text()
    lines = len(text.splitlines())
    found = [f"{lines} lines (at most {MODULE_LINES})"] if lines > MODULE_LINES else []
    helpers = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name not in CONTRACT_FUNCTIONS:
                helpers.append(node.name)
                if not node.name.startswith("_"):
                    found.append(f"function {node.name} (not of the contract)")
            if node.name != "add_arguments" and (length := node.end_lineno - node.lineno + 1) > RUN_LINES:
                found.append(f"function {node.name} of {length} lines (at most {RUN_LINES})")
        elif isinstance(node, ast.ClassDef):
            decorators = {ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
            fields_only = all(isinstance(n, (ast.AnnAssign, ast.Pass))
                              or isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in node.body)
            if not (decorators & {"dataclass", "dataclasses.dataclass"} and fields_only):
                found.append(f"class {node.name} (not a dataclass of fields)")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            names = [t.id if isinstance(t, ast.Name) else ast.unparse(t)
                     for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
            found += [f"name {name} (not an UPPER_CASE constant)" for name in names if not name.isupper()]
        elif not (isinstance(node, (ast.Import, ast.ImportFrom))
                  or isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            found.append(f"{type(node).__name__.lower()} statement at line {node.lineno}")
    if len(helpers) > PRIVATE_HELPERS:
        found.append(f"{len(helpers)} functions besides the contract's (at most {PRIVATE_HELPERS})")
    return found


def commands_imported(path: Path) -> list[str]:
    """The other commands (and the entry point) a module of suite/commands/ imports: the modules there that
    are not commands (NOT_COMMANDS, e.g. common_args) are what commands share."""
    from suite.cli import NOT_COMMANDS

    return sorted(name for name in suite_imports(path) if name.startswith("suite.cli")
                  or (parts := name.split("."))[:2] == ["suite", "commands"] and len(parts) > 2
                  and parts[2] not in NOT_COMMANDS)


def command_files() -> list[Path]:
    from suite.cli import NOT_COMMANDS

    return [p for p in sorted((SUITE / "commands").glob("*.py")) if p.stem not in {"__init__", *NOT_COMMANDS}]


@pytest.mark.parametrize("path", command_files(), ids=lambda p: p.name)
def test_a_command_parses_and_calls_and_imports_no_other_command(path):
    assert engine_parts(path) == []
    assert commands_imported(path) == []


def test_the_command_rule_catches_an_engine_and_an_import_of_another_command(tmp_path):
    """The checks themselves, on a command that grew an engine (what doctor, predict and compare-frameworks
    once were) and on one that borrows from another command (what wheels once did)."""
    long_body = "".join(f"    print(name, {i})\n" for i in range(RUN_LINES))
    engine = tmp_path / "doctor.py"
    engine.write_text(textwrap.dedent('''\
        """`suite doctor`."""
        from dataclasses import dataclass

        from suite.commands import common_args
        from suite.commands.install import stack_of

        NAME = "doctor"
        lines = []


        @dataclass
        class Request:
            cluster: str

            def check(self):
                pass


        class Line:
            text: str


        if NAME:
            pass


        def _short():
            pass


        def _shorter():
            pass


        def run(req):
            return doctor(req.cluster)


        def doctor(name):
        ''') + long_body)
    assert engine_parts(engine) == [
        "name lines (not an UPPER_CASE constant)", "class Request (not a dataclass of fields)",
        "class Line (not a dataclass of fields)", "if statement at line 23", "function doctor (not of the contract)",
        f"function doctor of {RUN_LINES + 1} lines (at most {RUN_LINES})",
        f"3 functions besides the contract's (at most {PRIVATE_HELPERS})"]
    assert commands_imported(engine) == ["suite.commands.install", "suite.commands.install.stack_of"]
    (tmp_path / "long.py").write_text('"""A long one."""\n' + "X = 1\n" * MODULE_LINES)
    assert engine_parts(tmp_path / "long.py") == [f"{MODULE_LINES + 1} lines (at most {MODULE_LINES})"]
