"""DigitSorter: an encoder-only Transformer that sorts 8 digits.

Output position i predicts the i-th smallest input digit. Two variants share one architecture
(101,258 parameters): with sinusoidal positional encoding, and without. Without positions,
self-attention is permutation-equivariant: shuffling the input only shuffles every output the same
way, so output slot i cannot know it is slot i and the model can at best guess the most common
digit (E[max count] / 8 = 0.300 per position). That failure is architectural, and
`sorting_ceiling_without_positions` computes its bound exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations_with_replacement

import torch
from torch import nn

from .attention import EncoderBlock, sinusoidal_positions
from .hub import ZooModel

SEQ_LEN, N_DIGITS = 8, 10
EVAL_SEED = 2024  # evaluation sequences come from their own generator, never the training one


class DigitSorter(ZooModel, license="mit", tags=["toy", "sorting"]):
    """Digit embedding (+ optional PE) -> n_layer pre-LN blocks -> linear head per position."""

    def __init__(self, n_digits: int = N_DIGITS, seq_len: int = SEQ_LEN, d_model: int = 64, n_head: int = 4,
                 n_layer: int = 2, d_ff: int = 256, use_pos_encoding: bool = True):
        super().__init__()
        self.d_model, self.seq_len, self.use_pos_encoding = d_model, seq_len, use_pos_encoding
        self.embed = nn.Embedding(n_digits, d_model)
        # Not a parameter (and not saved): both variants have exactly the same weights.
        self.register_buffer("pe", sinusoidal_positions(seq_len, d_model), persistent=False)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, n_head, d_ff) for _ in range(n_layer))
        self.head = nn.Linear(d_model, n_digits)

    def forward(self, x, return_attention=False, head_mask=None):
        """x: (B, T) digits -> logits (B, T, n_digits); with return_attention also a tuple of
        n_layer attention maps, each (B, n_head, T, T). head_mask: optional (n_layer, n_head),
        1 = keep, 0 = switch the head's output off for this call only."""
        # Scaling by sqrt(d) puts the embeddings on the same scale as the unit-amplitude sinusoids.
        h = self.embed(x) * math.sqrt(self.d_model)  # (B, T, D)
        if self.use_pos_encoding:
            h = h + self.pe[: x.size(1)]
        maps = []
        for i, block in enumerate(self.blocks):
            h, w = block(h, return_attention=return_attention, head_mask=None if head_mask is None else head_mask[i])
            maps.append(w)
        logits = self.head(h)  # (B, T, n_digits)
        return (logits, tuple(maps)) if return_attention else logits


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
