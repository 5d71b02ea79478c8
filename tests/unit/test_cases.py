"""What every case folder must hold, checked for each one found (a new case is checked by adding it)."""

import ast
import sys
from pathlib import Path

import pytest

from suite.inputs.cases import known_cases, load_case


@pytest.mark.parametrize("name", known_cases())
def test_tiny_sizes_are_options_of_the_case(name):
    case = load_case(name)
    tiny = case.spec.get("tiny")
    assert tiny, f"cases/{name}/case.toml has no [tiny] table"
    assert set(tiny) <= set(case.spec.get("options", {})), "every [tiny] key is one of the case's options"
    options = case.parse_options(case.tiny_args())
    assert all(options[key] == value for key, value in tiny.items())


def test_tiny_args_overrides():
    case = load_case("pytorch-synthetic")
    args = case.tiny_args(num_iters=500, image_size=None, amp=True)
    assert args[args.index("--num-iters") + 1] == "500" and "--image-size" not in args and "--amp" in args
    assert case.parse_options(args)["amp"] is True and case.parse_options(case.tiny_args())["amp"] is False


# Where an import's name is not its distribution's (the name pip lists, which [requires] uses); an
# import is covered by any of the distributions given.
DISTRIBUTIONS = {"PIL": {"pillow"}, "tf_keras": {"tf-keras"}, "mlperf_logging": {"mlperf-logging"},
                 # tf-keras depends on TensorFlow in whichever build the stack has (tensorflow, tensorflow-cpu)
                 "tensorflow": {"tensorflow", "tensorflow-cpu", "tf-keras"}}


def imported_packages(script: Path) -> set[str]:
    """The top-level packages a case's script imports, itself and through the modules of its folder and
    of cases/_shared that it imports, the standard library and the suite left out."""
    local = {p.stem: p for p in [*script.parent.glob("*.py"), *(script.parents[1] / "_shared").glob("*.py")]}
    seen, found, todo = set(), set(), [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top, last = name.split(".")[0], name.split(".")[-1]
                if top == "cases" and last in local:
                    todo.append(local[last])
                elif top in local:
                    todo.append(local[top])
                elif top not in sys.stdlib_module_names and top not in {"suite", "cases"}:
                    found.add(top)
    return found


@pytest.mark.parametrize("name", known_cases())
def test_every_package_the_training_script_imports_is_checked_before_launch(name):
    """[requires] names each package the case's script imports, so that a stack without one is refused
    in one line before launch instead of every rank dying at its import."""
    case = load_case(name)
    required = {package.lower() for package in case.spec.get("requires", {})}
    missing = {top for top in imported_packages(case.script)
               if not DISTRIBUTIONS.get(top, {top.lower().replace("_", "-")}) & required}
    assert not missing, f"cases/{name}/case.toml: [requires] lacks {sorted(missing)}"


def test_the_import_scan_follows_the_cases_own_modules():
    found = imported_packages(load_case("pytorch-ddp").script)
    assert {"torch", "numpy", "PIL"} <= found and "pipeline" not in found and "suite" not in found
