"""The GPT-2-style decoder of cases/pytorch-gpt/gpt.py in Flax (linen): token and position embeddings,
pre-norm blocks (causal self-attention, a GELU MLP of 4x the width), a final LayerNorm and a head tied
to the token embedding. Weights are initialised as GPT-2 does (normal 0.02, residual
projections scaled by 1/sqrt(2 x layers), biases zero). Parameters stay float32; `dtype` is the
arithmetic of every product, the head's included (bfloat16 on GPUs, as pytorch-gpt's autocast).

Attention (`attention`): "einsum" writes it out (QK^T, a causal mask, softmax, AV) so that XLA counts its
products in full, as the formula does; "xla" and "cudnn" call `jax.nn.dot_product_attention(..., is_causal=True,
implementation=...)`, the latter cuDNN's fused (flash) kernel on NVIDIA GPUs, a custom call whose FLOPs XLA's
cost analysis does not count."""

import math

import flax.linen as nn
import jax.numpy as jnp
import optax

from cases._shared.gpt_config import GPTConfig


def normal(std: float):
    return nn.initializers.normal(stddev=std)


ATTENTIONS = ("einsum", "xla", "cudnn")


def causal_attention(q, k, v, attention: str, dtype):
    """Causal self-attention of (batch, length, heads, head width) q, k, v, by `attention` (ATTENTIONS)."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention {attention!r} is none of {ATTENTIONS}")
    if attention != "einsum":
        import jax

        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=attention)
    length, head = q.shape[1], q.shape[-1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head)
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))
    scores = jnp.where(causal, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    weights = nn.softmax(scores, axis=-1).astype(dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


class Block(nn.Module):
    config: GPTConfig
    dtype: jnp.dtype = jnp.float32
    attention: str = "einsum"

    @nn.compact
    def __call__(self, x):
        c = self.config
        residual_init = normal(0.02 / math.sqrt(2 * c.layers))
        batch, length, width = x.shape
        head = width // c.heads
        h = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, name="norm_1")(x)
        qkv = nn.Dense(3 * width, kernel_init=normal(0.02), dtype=self.dtype, name="qkv")(h)
        q, k, v = (t.reshape(batch, length, c.heads, head) for t in jnp.split(qkv, 3, axis=-1))
        y = causal_attention(q, k, v, self.attention, self.dtype).reshape(batch, length, width)
        x = x + nn.Dense(width, kernel_init=residual_init, dtype=self.dtype, name="attention_proj")(y)
        h = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, name="norm_2")(x)
        h = nn.gelu(nn.Dense(4 * width, kernel_init=normal(0.02), dtype=self.dtype, name="fc")(h), approximate=True)
        return x + nn.Dense(width, kernel_init=residual_init, dtype=self.dtype, name="mlp_proj")(h)


class GPT(nn.Module):
    config: GPTConfig
    dtype: jnp.dtype = jnp.float32
    attention: str = "einsum"  # ATTENTIONS

    @nn.compact
    def __call__(self, tokens):
        """Logits (batch, length, vocab) of the next token at every position, in float32."""
        c = self.config
        embed = nn.Embed(c.vocab, c.width, embedding_init=normal(0.02), name="token_embedding")
        positions = nn.Embed(c.context, c.width, embedding_init=normal(0.02), name="position_embedding")
        x = embed(tokens) + positions(jnp.arange(tokens.shape[1]))[None]
        for index in range(c.layers):
            x = Block(c, self.dtype, self.attention, name=f"block_{index}")(x)
        x = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype, name="norm")(x)
        # the head, tied to the embedding, its product in `dtype` as autocast runs pytorch-gpt's: Embed.attend
        # promotes a bfloat16 query to the float32 table: over a quarter of GPT-2 small's FLOPs in float32
        head = embed.embedding.astype(self.dtype)
        return jnp.dot(x.astype(self.dtype), head.T).astype(jnp.float32)


def next_token_loss(logits, targets):
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


N_CONVENTION = "nanoGPT's: every parameter but the position embedding, the head tied to the token embedding once"


def parameters_counted(params, config: GPTConfig) -> int:
    """Parameters as nanoGPT counts them for its FLOPs (N_CONVENTION, as pytorch-gpt counts them)."""
    total = sum(int(leaf.size) for leaf in _leaves(params))
    return total - config.context * config.width


def _leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def training_flops_per_token(config: GPTConfig, parameters: int, length: int) -> float:
    """6 N + 12 L H Q T (PaLM's appendix B, nanoGPT's estimate_mfu), as cases/pytorch-gpt counts it."""
    head_width = config.width // config.heads
    return 6 * parameters + 12 * config.layers * config.heads * head_width * length
