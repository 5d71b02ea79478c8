"""`--preset tuned:FILE`: the settings `suite tune` found best for a case (a TOML file it writes: `case` and an
[options] table), passed back to any run of that case. The suite puts the file's options first among the case
arguments, so that options given after them win, as a named preset's do; the case itself never sees the file,
so it need not be readable where the case runs (a container, a batch job on another host)."""

from pathlib import Path

from suite.base.errors import UsageError
from suite.instack.case_options import given, option_args, tomllib, without_option

PREFIX = "tuned:"


def expand(case_name: str, case_args: list[str]) -> list[str]:
    """The case arguments with each `--preset tuned:FILE` replaced by FILE's options, placed first."""
    tuned = [value for _, _, value in given(case_args, "preset") if value.startswith(PREFIX)]
    if not tuned:
        return case_args
    first = [arg for value in tuned for arg in option_args(read(case_name, Path(value.removeprefix(PREFIX))))]
    return [*first, *without_option(case_args, "preset", which=lambda value: value.startswith(PREFIX))]


def read(case_name: str, path: Path) -> dict:
    """The [options] of a tuned preset, refused in one line where it is missing, unreadable or another case's."""
    try:
        preset = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--preset {PREFIX}{path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--preset {PREFIX}{path}: not a TOML file ({exc})") from None
    if preset.get("case") != case_name:
        raise UsageError(f"--preset {PREFIX}{path} was tuned for case {preset.get('case')!r}, not {case_name}")
    options = preset.get("options")
    if not isinstance(options, dict):
        raise UsageError(f"--preset {PREFIX}{path} has no [options] table")
    return options


def text(case_name: str, options: dict, comments: list[str]) -> str:
    """A tuned preset's file: comments, the case and its options."""
    lines = [f"# {line}" for line in comments] + [f"case = {quoted(case_name)}", "", "[options]"]
    lines += [f"{quoted(name)} = {value_text(value)}" for name, value in options.items()]
    return "\n".join(lines) + "\n"


def quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def value_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float)) else quoted(str(value))
