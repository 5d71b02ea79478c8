"""pytorch-gpt data: a flat file of uint16 token ids at D/tokens/train.bin (nanoGPT's format).

    data.py --data-dir D --src FOLDER       every text file under FOLDER (sorted by path, binary files left
                                            out), tokenized by bytes: token = byte value, vocabulary 256
    data.py --data-dir D --src FILE.bin     links a file already tokenized (nanoGPT's train.bin, any
                                            tokenizer whose ids fit in uint16); nothing is copied
    data.py --data-dir D --synthetic        generated English-like text, tokenized by bytes

D/tokens/manifest.json says what is there (source, tokenizer, vocabulary, tokens, files).
Runs inside the pytorch stack, or the jax stack for jax-gpt (numpy)."""

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from cases._shared.folders import swapped_in
from suite.instack.arguments import data_parser

FOLDER = "tokens"
BYTE_VOCAB = 256
WORDS = ("the a one every small large quick slow red blue model node rank device token batch step loss cluster "
         "trains reads writes sends waits measures runs scales falls grows on in with from to after before "
         "and but while because").split()


def parse_args(argv=None) -> argparse.Namespace:
    parser = data_parser("pytorch-gpt", __doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--src", type=Path, help="a folder of text files, or a train.bin of uint16 token ids")
    parser.add_argument("--synthetic", action="store_true", help="generate English-like text")
    parser.add_argument("--synthetic-bytes", type=int, default=1 << 20, help="synthetic: bytes of text")
    parser.add_argument("--seed", type=int, default=100, help="synthetic: seed of the generated text")
    args = parser.parse_args(argv)
    if args.synthetic == bool(args.src):
        parser.error("give exactly one of --src FOLDER|FILE.bin (SRC=...) or --synthetic (SYNTHETIC=1)")
    if args.src and not args.src.exists():
        parser.error(f"--src {args.src} does not exist")
    if args.synthetic_bytes < 2:
        parser.error("--synthetic-bytes must be at least 2")
    return args


def text_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(text files, binary files) under `folder`, sorted by path; hidden ones left out. A file with a
    NUL byte in its first 8 KiB counts as binary."""
    text, binary = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        with open(path, "rb") as f:
            (binary if b"\0" in f.read(8192) else text).append(path)
    return text, binary


def write_bytes_as_tokens(chunks, out: Path) -> int:
    """Writes each chunk of bytes as uint16 tokens, one after the other; the number of tokens."""
    count = 0
    with open(out, "wb") as f:
        for chunk in chunks:
            np.frombuffer(chunk, dtype=np.uint8).astype(np.uint16).tofile(f)
            count += len(chunk)
    return count


def generated_text(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    sentences, length = [], 0
    while length < size:
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
        sentence = " ".join(words).capitalize() + ". "
        sentences.append(sentence)
        length += len(sentence)
    return "".join(sentences).encode()[:size]


def from_folder(folder: Path, partial: Path) -> dict:
    text, binary = text_files(folder)
    if not text:
        sys.exit(f"error: no text files under {folder}")
    tokens = write_bytes_as_tokens((path.read_bytes() for path in text), partial / "train.bin")
    return {"source": str(folder.resolve()), "synthetic": False, "tokenizer": "bytes", "vocab_size": BYTE_VOCAB,
            "tokens": tokens, "files": len(text), "binary_files_left_out": len(binary)}


def from_token_file(path: Path, partial: Path) -> dict:
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    if path.stat().st_size % 2 or len(tokens) < 2:
        sys.exit(f"error: {path} is not a file of uint16 token ids (odd size, or fewer than 2 tokens)")
    (partial / "train.bin").symlink_to(path.resolve())
    return {"source": str(path.resolve()), "synthetic": False, "tokenizer": "given",
            "vocab_size": int(tokens.max()) + 1, "tokens": len(tokens), "files": 1}


def from_generated(args: argparse.Namespace, partial: Path) -> dict:
    tokens = write_bytes_as_tokens([generated_text(args.synthetic_bytes, args.seed)], partial / "train.bin")
    return {"source": "synthetic-text", "synthetic": True, "tokenizer": "bytes", "vocab_size": BYTE_VOCAB,
            "tokens": tokens, "files": 0, "seed": args.seed}


def main(argv=None) -> None:
    args = parse_args(argv)
    out = args.data_dir.resolve() / FOLDER
    with swapped_in(out) as partial:
        if args.synthetic:
            manifest = from_generated(args, partial)
        elif args.src.is_dir():
            manifest = from_folder(args.src, partial)
        else:
            manifest = from_token_file(args.src, partial)
        manifest["prepared_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{out / 'train.bin'}: {manifest['tokens']:,} tokens, vocabulary {manifest['vocab_size']} "
          f"({manifest['tokenizer']}, from {manifest['source']})", flush=True)


if __name__ == "__main__":
    main()
