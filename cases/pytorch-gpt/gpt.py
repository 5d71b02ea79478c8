"""A GPT-2-style decoder in plain PyTorch: token and position embeddings, pre-norm blocks (causal
self-attention through F.scaled_dot_product_attention, which picks flash attention on GPUs, and a
GELU MLP of 4x the width), a final LayerNorm and a head tied to the token embedding. Weights are
initialised as GPT-2 does (normal 0.02, residual projections scaled by 1/sqrt(2 x layers)).

GPT-2 small is 12 layers, 12 heads, width 768, context 1,024; its vocabulary of 50,257 is padded to
50,304 (a multiple of 64) as nanoGPT does."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cases._shared.gpt_config import GPTConfig


class SelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(batch, length, width))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.width, 4 * config.width)
        self.proj = nn.Linear(4 * config.width, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.norm_1 = nn.LayerNorm(config.width)
        self.attention = SelfAttention(config)
        self.norm_2 = nn.LayerNorm(config.width)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm_1(x))
        return x + self.mlp(self.norm_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, activation_checkpointing: bool = False):
        super().__init__()
        self.config = config
        self.activation_checkpointing = activation_checkpointing
        self.token_embedding = nn.Embedding(config.vocab, config.width)
        self.position_embedding = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)
        self.head.weight = self.token_embedding.weight  # tied
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("proj.weight"):  # the projections into the residual stream
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, length, vocab) of the next token at every position."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            # Recomputed in the backward pass instead of keeping the block's activations.
            x = checkpoint(block, x, use_reentrant=False) if self.activation_checkpointing else block(x)
        return self.head(self.norm(x))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


class WithLoss(nn.Module):
    """The model and a loss of its logits in one forward pass, (tokens, targets) -> loss: what
    torch.compile takes as one graph (nanoGPT's model returns its loss too), so the logits' float copy
    and the softmax are fused instead of written out."""

    def __init__(self, model: nn.Module, loss=next_token_loss):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model(tokens), targets)


N_CONVENTION = "nanoGPT's: every parameter but the position embedding, the head tied to the token embedding once"


def parameters_counted(model: GPT) -> int:
    """Parameters as nanoGPT counts them for its FLOPs (N_CONVENTION): all but the position embedding
    (the token embedding stays in: it is the head's weight too, counted once). PaLM's N leaves both
    embeddings out (non_embedding_parameters): at GPT-2 small its 6 N + 12 L H Q T is 1.37 times smaller."""
    return sum(p.numel() for p in model.parameters()) - model.position_embedding.weight.numel()


def non_embedding_parameters(model: GPT) -> int:
    """PaLM's N: the parameters of the blocks and the final norm, no embedding (and so no tied head)."""
    return parameters_counted(model) - model.token_embedding.weight.numel()


def training_flops_per_token(config: GPTConfig, parameters: int, length: int) -> float:
    """6 N + 12 L H Q T (PaLM's appendix B, nanoGPT's estimate_mfu): the weights' multiply-adds forward
    and backward, plus attention's QK^T and AV over `length` positions, counted in full (as if not causal)."""
    head_width = config.width // config.heads
    return 6 * parameters + 12 * config.layers * config.heads * head_width * length
