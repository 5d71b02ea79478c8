"""The options that put a bare loop on a GPU, named as the cases name them (pytorch-gpt's --precision, --compile,
--optimizer-impl, --gc-every; jax-gpt's --attention; every case's --min-seconds): what `make gpu-check` passes
each bare loop beside the options it passes the suite's run. They are taken out of the command line before the
loop's own options are read (gpt_options.parse_args, shared by the GPT loops, stays as it is), and each default
is the loop's CPU behaviour, so that `make bench` runs the loops as before.

  --device cpu | auto | cuda   cpu (default): the CPU, as make bench runs them; auto: the first GPU where the
                               framework sees one, else the CPU (the JSON line says which, and gpu-check fails a
                               side that trained on the CPU); cuda: the first GPU, or the loop stops
  --precision auto | bf16 | fp32   auto: bfloat16 on a GPU, float32 on the CPU (the cases' auto)
  --min-seconds S              timed iterations grow until the window lasts S seconds, by the cases' rule
                               (cases/_shared/timed.py: after the first); 0 (default): exactly --num-iters
"""

import argparse
import os
import sys


def add(parser: argparse.ArgumentParser, framework: str) -> None:
    """The GPU options of a loop in `framework`: "torch" (pytorch-gpt's), "jax" (jax-gpt's), or "common"
    (--device, --precision and --min-seconds alone: the jax-resnet loop's)."""
    parser.add_argument("--device", choices=("cpu", "auto", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    parser.add_argument("--min-seconds", type=float, default=0.0)
    if framework == "torch":
        parser.add_argument("--compile", action="store_true", help="torch.compile the model with its loss")
        parser.add_argument("--optimizer-impl", choices=("auto", "foreach", "fused"), default="auto",
                            help="AdamW's implementation; auto: fused on a GPU, foreach on the CPU")
        parser.add_argument("--gc-every", type=int, default=0, help="the case's --gc-every (0: automatic collection)")
    elif framework == "jax":
        parser.add_argument("--attention", choices=("einsum", "xla", "cudnn"), default="einsum",
                            help="jax-gpt's attention implementation (resolved: auto is the case's to decide)")
    elif framework != "common":
        raise ValueError(f"framework {framework!r}: torch, jax or common")


def take(framework: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The GPU options of a GPT loop in `framework` ("torch" or "jax"), removed from `argv` (sys.argv by
    default), so that gpt_options.parse_args reads the rest."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add(parser, framework)
    args = sys.argv if argv is None else argv
    known, rest = parser.parse_known_args(args[1:])
    args[1:] = rest
    return known


def wants_bf16(precision: str, on_gpu: bool) -> bool:
    """--precision auto: bfloat16 on a GPU, float32 on the CPU, as the cases decide it."""
    return precision == "bf16" or (precision == "auto" and on_gpu)


def choose_jax_platform(asked: str, script: str) -> str:
    """"gpu" or "cpu", to be called before JAX makes its backend: the CPU (JAX_PLATFORMS=cpu, as the JAX cases
    set it there) unless --device asks for a GPU and this environment's JAX has one, decided as the cases
    decide it (suite/instack/jax_platforms.py); --device cuda stops where it has none."""
    from suite.instack.jax_platforms import jax_gpu_platform

    if asked != "cpu" and jax_gpu_platform() is not None:
        return "gpu"
    if asked == "cuda":
        raise SystemExit(f"{script}: --device cuda, but this JAX has no GPU plugin or the host shows no GPU")
    os.environ["JAX_PLATFORMS"] = "cpu"
    return "cpu"
