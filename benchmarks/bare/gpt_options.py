"""The options of the bare GPT loops (pytorch_gpt.py, jax_gpt.py), named as the GPT cases name them, with
GPT-2 small's sizes as defaults: the bench passes both loops the same options it passes the cases."""

import argparse

SIZES = [("layers", 12), ("heads", 12), ("width", 768), ("context", 1024), ("vocab-size", 50304), ("batch-size", 8),
         ("num-warmup-batches", 10), ("num-batches-per-iter", 10), ("num-iters", 10), ("seed", 1234)]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name, default in SIZES:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--lr", type=float, default=6e-4)
    return parser.parse_args()
