"""Case options, declared once in a case's case.toml and parsed the same way by the runner (to
refuse bad input before launch) and by the case script inside its stack. Standard library only
(tomli stands in for tomllib before Python 3.11)."""

import argparse
import ast
import math
import operator
import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11, e.g. NVIDIA's MXNet image: tomli is the same parser
    import tomli as tomllib
from pathlib import Path

TYPES = {"int": int, "float": float, "str": str}


class OptionError(ValueError):
    pass


class RuleError(OptionError):
    """A case's rule between options does not hold."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise OptionError(message)


def load_case_toml(case_dir: str | Path) -> dict:
    with open(Path(case_dir) / "case.toml", "rb") as f:
        return tomllib.load(f)


def build_parser(case: dict) -> argparse.ArgumentParser:
    parser = _Parser(prog=case["name"], description=case.get("summary"), add_help=False)
    if "same_work" in case:
        parser.add_argument("--same-work", action="store_true", help=(
            "the same work as every framework's case: ResNet-50 v1.5, 224 px, 1000 classes, batch 32 per device, "
            f"float32, a random batch in device memory; sets {' '.join(same_work_argv(case))} (later options win)"))
    if presets := case.get("presets"):
        shown = "; ".join(f"{name}: {' '.join(preset_argv(case, name))}" for name in presets)
        parser.add_argument("--preset", choices=sorted(presets), default=None, help=(
            f"option values as a published figure was measured ({shown}); later options win"))
    for name, spec in case.get("options", {}).items():
        flag = f"--{name}"
        if spec["type"] == "flag":
            parser.add_argument(flag, action="store_true", help=spec.get("help"))
        else:
            parser.add_argument(
                flag,
                type=_checked(name, spec),
                default=spec.get("default"),
                choices=spec.get("choices"),
                help=f"{spec.get('help', '')} (default: {spec.get('default')})",
            )
    return parser


def _checked(name: str, spec: dict):
    convert = TYPES[spec["type"]]

    def check(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {spec['type']}, got '{text}'") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got '{text}'")
        if "min" in spec and value < spec["min"]:
            raise argparse.ArgumentTypeError(f"must be at least {spec['min']}, got {value}")
        if "max" in spec and value > spec["max"]:
            raise argparse.ArgumentTypeError(f"must be at most {spec['max']}, got {value}")
        if "pattern" in spec and not re.fullmatch(spec["pattern"], value):
            raise argparse.ArgumentTypeError(f"expected {spec.get('pattern_text', spec['pattern'])}, got '{text}'")
        return value

    check.__name__ = spec["type"]
    return check


def parse_options(case: dict, argv: list[str]) -> dict:
    """Option values by option name (dashes kept), or OptionError with a one-line message; the case's
    [[rules]] between options are checked too."""
    namespace = build_parser(case).parse_args(with_same_work(case, argv))
    names = [*case.get("options", {}), *(["same-work"] if "same_work" in case else []),
             *(["preset"] if "presets" in case else [])]
    options = {name: getattr(namespace, name.replace("-", "_")) for name in names}
    check_rules(case, options)
    return options


def option_args(options: dict) -> list[str]:
    """Case argv from {option name: value}: True is a bare flag, None and False leave the option out."""
    argv = []
    for name, value in options.items():
        if value is not None and value is not False:
            argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv


def given(argv: list[str], name: str, flag: bool = False) -> list[tuple[int, int, str | bool]]:
    """Each place case arguments give --NAME: (its index, the index after it, its value) for `--NAME V`,
    `--NAME=V` and, where --NAME is a flag, a bare `--NAME` (True). A value option last with no value is
    no place: the parser refuses it."""
    places, option, index = [], f"--{name}", 0
    while index < len(argv):
        arg = argv[index]
        if arg.startswith(option + "="):
            places.append((index, index + 1, arg[len(option) + 1:]))
        elif arg == option and flag:
            places.append((index, index + 1, True))
        elif arg == option and index + 1 < len(argv):
            places.append((index, index + 2, argv[index + 1]))
            index += 1
        index += 1
    return places


def value_given(argv: list[str], name: str, flag: bool = False) -> str | bool | None:
    """The last value case arguments give --NAME (True for a flag given), or None where they do not."""
    places = given(argv, name, flag)
    return places[-1][2] if places else None


def without_option(argv: list[str], name: str, flag: bool = False, which=None) -> list[str]:
    """The case arguments with --NAME taken out: every place, or those whose value `which(value)` is true."""
    dropped = {index for start, end, value in given(argv, name, flag) if which is None or which(value)
               for index in range(start, end)}
    return [arg for index, arg in enumerate(argv) if index not in dropped]


def with_option(argv: list[str], name: str, value, flag: bool = False) -> list[str]:
    """The case arguments with --NAME set to `value`, last: a flag added (True) or taken out (False), else
    `--NAME VALUE`."""
    return [*without_option(argv, name, flag), *option_args({name: value})]


def is_flag(case: dict, name: str) -> bool:
    return case.get("options", {}).get(name, {}).get("type") == "flag"


def same_work_argv(case: dict) -> list[str]:
    """The option values of the case's [same_work] table (its `tiny` sub-table left out)."""
    return option_args({k: v for k, v in case.get("same_work", {}).items() if not isinstance(v, dict)})


def preset_argv(case: dict, name: str) -> list[str]:
    """The option values of one of the case's [presets.NAME] tables (its `source` left out)."""
    return option_args({k: v for k, v in case.get("presets", {}).get(name, {}).items() if k != "source"})


def with_same_work(case: dict, argv: list[str]) -> list[str]:
    """--same-work and --preset NAME stand for their tables' values, placed first so that later
    options win (a preset name that is not the case's is left for the parser to refuse)."""
    argv = list(argv)
    first = same_work_argv(case) if "same_work" in case and "--same-work" in argv else []
    for _, _, name in given(argv, "preset"):
        first += preset_argv(case, name)
    return [*first, *argv]


OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod,
             ast.FloorDiv: operator.floordiv, ast.Lt: operator.lt,
             ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
             ast.NotEq: operator.ne}


# What a rule may name besides the options: the run point's world, known once the hosts are chosen.
WORLD_NAMES = frozenset({"nodes", "devices", "devices_per_node"})


def check_rules(case: dict, options: dict, world: dict | None = None) -> None:
    """A case's [[rules]]: `when` (optional) and `require` are expressions over its options (dashes
    written as underscores, numbers, + - * % //, comparisons, and/or/not); where `when` holds and
    `require` does not, the rule's message is the error. Rules that name the world (WORLD_NAMES) are
    checked only where `world` gives their values (the runner, for each host of each run point); the
    others only where it does not."""
    values = {**{name.replace("-", "_"): value for name, value in options.items()}, **(world or {})}
    for rule in case.get("rules", []):
        if bool(names_in(rule) & WORLD_NAMES) != (world is not None):
            continue
        if evaluate(rule.get("when", "True"), values) and not evaluate(rule["require"], values):
            raise RuleError(f"{rule['message']} (rule: {rule['require']})")


def names_in(rule: dict) -> set[str]:
    texts = (rule.get("when", "True"), rule["require"])
    return {node.id for text in texts for node in ast.walk(ast.parse(text, mode="eval")) if isinstance(node, ast.Name)}


def evaluate(text: str, values: dict):
    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id] if node.id != "True" else True
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value(node.operand)
        if isinstance(node, ast.BoolOp):
            results = (value(v) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in OPERATORS:
            return OPERATORS[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        raise ValueError(f"rule {text!r}: {ast.dump(node)[:60]} is not allowed")

    return value(ast.parse(text, mode="eval").body)


def parse_case_args(script: str, argv: list[str] | None = None) -> argparse.Namespace:
    """For case scripts: parse sys.argv against the case.toml beside the script."""
    case = load_case_toml(Path(script).resolve().parent)
    parser = build_parser(case)
    try:
        return parser.parse_args(with_same_work(case, sys.argv[1:] if argv is None else argv))
    except OptionError as exc:
        parser.exit(2, f"{case['name']}: {exc}\n")
