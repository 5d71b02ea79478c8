"""Case options, declared once in a case's case.toml and parsed the same way by the runner (to
refuse bad input before launch) and by the case script inside its stack. Standard library only
(tomli stands in for tomllib before Python 3.11)."""

import argparse

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11, e.g. NVIDIA's MXNet image: tomli is the same parser
    import tomli as tomllib
from pathlib import Path

TYPES = {"int": int, "float": float, "str": str}


class OptionError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise OptionError(message)


def load_case_toml(case_dir: str | Path) -> dict:
    with open(Path(case_dir) / "case.toml", "rb") as f:
        return tomllib.load(f)


def build_parser(case: dict) -> argparse.ArgumentParser:
    parser = _Parser(prog=case["name"], description=case.get("summary"), add_help=False)
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
        if "min" in spec and value < spec["min"]:
            raise argparse.ArgumentTypeError(f"must be at least {spec['min']}, got {value}")
        return value

    check.__name__ = spec["type"]
    return check


def parse_options(case: dict, argv: list[str]) -> dict:
    """Option values by option name (dashes kept), or OptionError with a one-line message."""
    namespace = build_parser(case).parse_args(argv)
    return {name: getattr(namespace, name.replace("-", "_")) for name in case.get("options", {})}


def parse_case_args(script: str, argv: list[str] | None = None) -> argparse.Namespace:
    """For case scripts: parse sys.argv against the case.toml beside the script."""
    case = load_case_toml(Path(script).resolve().parent)
    parser = build_parser(case)
    try:
        return parser.parse_args(argv)
    except OptionError as exc:
        parser.exit(2, f"{case['name']}: {exc}\n")
