#!/usr/bin/env python3
"""The Makefile's check of the variables given on make's command line that the asked goals do not take.

    check-make-variables.py --asked "run" --given "NODE NCCL_DEBUG" run="CASE NODES ..." tune="..." ...

Prints one refusal line (make stops with it) where a given name is another goal's variable or looks like a
misspelt variable of the asked goals (NODE for NODES, GPU_PER_NODE for GPUS_PER_NODE); prints nothing otherwise,
so that a name such as NCCL_DEBUG=INFO still reaches the run's environment, as make passes it. Standard library
only: it runs before the runner's .venv exists."""
import argparse
import difflib


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asked", required=True, help="the goals make was asked for")
    parser.add_argument("--given", required=True, help="the command line's variables the asked goals do not take")
    parser.add_argument("lists", nargs="*", metavar="GOAL=VARIABLES", help="each goal's variables")
    return parser.parse_args(argv)


def likely_meant(name: str, taken: list[str], known: list[str]) -> str | None:
    """The variable `name` is probably a misspelling of: one of the asked goals' that it cuts short (NODE) or adds a
    word or an S to (TELEMETRY_INTERVAL, REPEATS; not PYTHONPATH), else any goal's close to it (GPU_PER_NODE)."""
    for variable in taken:
        if (len(name) >= 3 and variable.startswith(name)) or name.startswith((f"{variable}_", f"{variable}S")):
            return variable
    close = difflib.get_close_matches(name, taken, n=1, cutoff=0.8) or difflib.get_close_matches(name, known, n=1,
                                                                                                 cutoff=0.8)
    return close[0] if close else None


def goals_taking(name: str, lists: dict[str, list[str]]) -> str:
    """'make gpu-check, make run and make tune take it' for the goals whose variables include `name`."""
    goals = [f"make {goal}" for goal in sorted(lists) if name in lists[goal]]
    return " and ".join(filter(None, [", ".join(goals[:-1]), goals[-1]])) + (" take it" if goals[1:] else " takes it")


def refusal(asked: list[str], given: list[str], lists: dict[str, list[str]]) -> str:
    taken = sorted({v for goal in asked for v in lists.get(goal, [])})
    known = sorted({v for variables in lists.values() for v in variables})
    what, its = f"make {' '.join(asked)}", f"its variables: {' '.join(taken) or 'none'}"
    for name in given:
        if name in known:
            return f"{what} takes no {name} ({goals_taking(name, lists)}); {its}"
        meant = likely_meant(name, taken, known)
        if meant in taken:
            return f"{what} takes no {name}: did you mean {meant}? {its[0].upper()}{its[1:]}"
        if meant:
            return f"{what} takes no {name}: did you mean {meant}? ({goals_taking(meant, lists)}); {its}"
    return ""


def main(argv=None) -> None:
    args = parse_args(argv)
    lists = {}
    for item in args.lists:
        goal, _, variables = item.partition("=")
        lists[goal] = variables.split()
    print(refusal(args.asked.split(), args.given.split(), lists))


if __name__ == "__main__":
    main()
