"""The sizes of the GPT-2-style decoder that pytorch-gpt and jax-gpt both train, one definition for both
frameworks. GPT-2 small is 12 layers, 12 heads, width 768, context 1,024; its vocabulary of 50,257 is
padded to 50,304 (a multiple of 64) as nanoGPT does."""

from dataclasses import dataclass


@dataclass(frozen=True)
class GPTConfig:
    layers: int = 12
    heads: int = 12
    width: int = 768
    context: int = 1024
    vocab: int = 50304

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"the width ({self.width}) must be a multiple of the heads ({self.heads})")
