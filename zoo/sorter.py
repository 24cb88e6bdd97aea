"""Digit Transformers: an encoder that reads digits and writes one class per position.

DigitSorter is the seed article's sorter: output position i predicts the i-th smallest of 8 input
digits. Two variants share one architecture (101,258 parameters): with sinusoidal positional
encoding, and without. Without positions, self-attention is permutation-equivariant: shuffling the
input only shuffles every output the same way, so output slot i cannot know it is slot i and the
model can at best guess the most common digit (E[max count] / 8 = 0.300 per position). That failure
is architectural, and `sorting_ceiling_without_positions` computes its bound exactly.

DigitTransformer is the general model the playground trains (zoo.playground): any task, any kind of
positions (none, sinusoidal, learned, rotary), bidirectional or causal, pre-LN or post-LN, with or
without one of the seed article's mistakes. DigitSorter is DigitTransformer with the sorter's
settings, and the same weights.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations_with_replacement

import torch
from torch import nn

from .attention import EncoderBlock, causal_mask, key_padding_mask, sinusoidal_positions
from .hub import ZooModel

SEQ_LEN, N_DIGITS = 8, 10
EVAL_SEED = 2024  # evaluation sequences come from their own generator, never the training one
POSITIONS = ("none", "sinusoidal", "learned", "rotary")


class DigitTransformer(ZooModel, license="mit", tags=["toy", "attention-lab"]):
    """Token embedding (+ positions) -> n_layer encoder blocks -> a linear head per position.

    n_in input tokens (digits, and a padding token when pad_id is set), n_out output classes.
    Positions: "sinusoidal" adds the fixed table (scaled embeddings keep the two on one scale),
    "learned" adds a trained table, "rotary" rotates queries and keys inside attention, "none" adds
    nothing. Position tables are 2 * seq_len long, so the model can be tried on longer inputs than it
    was trained on (a learned table's entries past seq_len never see training).
    """

    def __init__(self, n_in: int = N_DIGITS, n_out: int = N_DIGITS, seq_len: int = SEQ_LEN, d_model: int = 64,
                 n_head: int = 4, n_layer: int = 2, d_ff: int = 256, positions: str = "sinusoidal",
                 causal: bool = False, norm: str = "pre", mistake: str = "none", pad_id: int | None = None):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}; got {positions!r}")
        self.d_model, self.seq_len, self.positions = d_model, seq_len, positions
        self.causal, self.pad_id = causal, pad_id
        self.embed = nn.Embedding(n_in, d_model)
        # Not a parameter (and not saved): models with and without it have the same weights.
        self.register_buffer("pe", sinusoidal_positions(2 * seq_len, d_model), persistent=False)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, n_head, d_ff, norm=norm, rotary=positions == "rotary",
                                                 mistake=mistake) for _ in range(n_layer))
        self.head = nn.Linear(d_model, n_out)
        if positions == "learned":
            self.pos = nn.Embedding(2 * seq_len, d_model)

    @property
    def max_len(self):
        return 2 * self.seq_len

    def mask(self, x):
        """The attention mask for inputs x (B, T): causal and/or hiding padding, or None."""
        mask = causal_mask(x.size(1), x.device) if self.causal else None
        if self.pad_id is not None:
            padding = key_padding_mask(x != self.pad_id)  # (B, 1, 1, T)
            mask = padding if mask is None else mask & padding
        return mask

    def forward(self, x, return_attention=False, head_mask=None):
        """x: (B, T) tokens, T <= max_len -> logits (B, T, n_out); with return_attention also a
        tuple of n_layer attention maps, each (B, n_head, T, T). head_mask: optional
        (n_layer, n_head), 1 = keep, 0 = switch the head's output off for this call only."""
        return self.from_embeddings(self.embed(x), self.mask(x), return_attention, head_mask)

    def from_embeddings(self, e, mask=None, return_attention=False, head_mask=None):
        """The model from its token embeddings e (B, T, D) on: what forward() runs after the lookup,
        and what attribution (zoo.attribution) differentiates."""
        if e.size(1) > self.max_len:
            raise ValueError(f"{e.size(1)} tokens; this model's positions go up to {self.max_len}")
        # Scaling by sqrt(d) puts the embeddings on the same scale as the unit-amplitude sinusoids.
        h = e * math.sqrt(self.d_model)  # (B, T, D)
        if self.positions == "sinusoidal":
            h = h + self.pe[: e.size(1)]
        elif self.positions == "learned":
            h = h + self.pos.weight[: e.size(1)]
        maps = []
        for i, block in enumerate(self.blocks):
            h, w = block(h, mask=mask, return_attention=return_attention,
                         head_mask=None if head_mask is None else head_mask[i])
            maps.append(w)
        logits = self.head(h)  # (B, T, n_out)
        return (logits, tuple(maps)) if return_attention else logits


class DigitSorter(DigitTransformer, license="mit", tags=["toy", "sorting"]):
    """The seed article's sorter: digit embedding (+ sinusoidal positions or none) -> n_layer
    pre-LN blocks -> a linear head per position. config.json keeps the sorter's own settings."""

    def __init__(self, n_digits: int = N_DIGITS, seq_len: int = SEQ_LEN, d_model: int = 64, n_head: int = 4,
                 n_layer: int = 2, d_ff: int = 256, use_pos_encoding: bool = True):
        super().__init__(n_in=n_digits, n_out=n_digits, seq_len=seq_len, d_model=d_model, n_head=n_head,
                         n_layer=n_layer, d_ff=d_ff, positions="sinusoidal" if use_pos_encoding else "none")
        self.use_pos_encoding = use_pos_encoding


def sorting_ceiling_without_positions(seq_len=SEQ_LEN, n_digits=N_DIGITS):
    """Best per-position accuracy any permutation-equivariant model can reach: E[max count]/T.

    Exact: sums over every multiset of digits, weighted by its multinomial probability
    (24,310 multisets for 8 digits of 10).
    """
    total = 0.0
    for multiset in combinations_with_replacement(range(n_digits), seq_len):
        counts = Counter(multiset).values()
        ways = math.factorial(seq_len)
        for c in counts:
            ways //= math.factorial(c)
        total += ways * max(counts)
    return total / n_digits**seq_len / seq_len


def sequence_ceiling_without_positions(seq_len=SEQ_LEN, n_digits=N_DIGITS):
    """Best whole-sequence accuracy of a permutation-equivariant model: each output slot is a
    function f(own digit, multiset), so for a given multiset at most one arrangement of it (the one
    f maps onto the sorted order) comes out sorted: one per multiset, C(n+T-1, T) / n^T."""
    return math.comb(n_digits + seq_len - 1, seq_len) / n_digits**seq_len


def random_digits(n, generator, device="cpu"):
    """(n, 8) random digits and their sorted version, the targets."""
    x = torch.randint(0, N_DIGITS, (n, SEQ_LEN), generator=generator).to(device)
    return x, x.sort(dim=1).values


def eval_set(n=5000, seed=EVAL_SEED):
    """Fixed evaluation sequences: the same n sequences for every model and every call."""
    return random_digits(n, torch.Generator().manual_seed(seed))


@torch.inference_mode()
def accuracy(model, x, y, head_mask=None):
    """(per-position accuracy, whole-sequence accuracy, accuracy of each output slot) of a model in
    eval mode (this function never changes a model: the app shares them between requests)."""
    correct = model(x.to(next(model.parameters()).device), head_mask=head_mask).argmax(-1).cpu() == y
    return correct.float().mean().item(), correct.all(1).float().mean().item(), correct.float().mean(0).tolist()
