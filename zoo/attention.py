"""Attention from scratch: the building blocks every zoo model is made of.

Read top to bottom like the paper: scaled dot-product attention, masks, multi-head attention,
sinusoidal and rotary positions, the feed-forward layer and the encoder block. Shapes use
B = batch, H = heads, T = tokens, D = d_model, Dh = D / H.

Masks are boolean and True means "may attend". They broadcast against the score matrix
(B, H, T_q, T_k) and act on the *key* axis: a query row decides which keys it may look at.

The playground's variants are constructor options whose defaults are the paper's path: rotary
positions (RoPE), post-LN blocks, and the seed article's common mistakes (MISTAKES), built in on
purpose so that a learner can train with one and see what it does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# The seed article's common mistakes, as switches (MultiHeadAttention's `mistake`):
#   "no-scaling":      scores are q.k, not q.k / sqrt(d_k), so the softmax saturates;
#   "mask-query-axis": the mask is applied to the queries (transposed): a causal mask then lets each
#                      query see its future instead of its past, a padding mask hides pads' rows;
#   "no-transpose":    heads are split with a reshape of (B, T, D) to (B, H, T, Dh), no transpose,
#                      which mixes tokens across heads.
MISTAKES = ("none", "no-scaling", "mask-query-axis", "no-transpose")


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, scale=None):
    """softmax(q k^T / sqrt(d_k)) v, returning the output and the attention weights.

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v); mask: bool, broadcastable to
    (..., T_q, T_k), True = may attend. Masked weights are exactly 0 and a fully masked row gives
    zero weights (and a zero output) instead of NaN. Dropout, when asked for, acts on the weights
    used for the output; the returned weights are the clean ones. scale replaces 1 / sqrt(d_k).
    """
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., T_q, T_k)
    if mask is not None:
        # The most negative finite number, not -inf: a fully masked row then softmaxes to a
        # uniform row (no NaN, no NaN gradient) that the masked_fill below zeroes out.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    used = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return used @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


def causal_mask(n, device=None):
    """(n, n) lower-triangular mask: query i may attend to keys 0..i."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def key_padding_mask(valid):
    """(B, T_k) bool, True for real tokens -> (B, 1, 1, T_k), acting on the key axis.

    Padding keys are hidden from every query; padding *queries* still get a (meaningless) row,
    which the loss ignores. Masking the query axis instead would let real tokens attend to pads.
    """
    return valid[:, None, None, :]


def rotate_pairs(x, positions, base=10000.0):
    """RoPE (Su et al. 2021): rotate each pair of dimensions (2i, 2i+1) of x (..., T, Dh) by the
    angle position * base^(-2i/Dh). A query rotated by m and a key rotated by n then meet at an angle
    that depends on m - n only, so their dot product sees the offset between them, not where they
    are. positions: (T,) integers."""
    d = x.size(-1)
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)  # (Dh/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq  # (T, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, Dh/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, Dh/2, 2)
    return rotated.flatten(-2)  # (..., T, Dh)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: project queries, keys and values, attend in each head, merge, project.

    forward() returns (out, weights); weights is (B, H, T_q, T_k) when return_attention=True, else
    None. Keys and values come from the input itself (self-attention) or, precomputed with
    project_kv, from another sequence (cross-attention) or from a decoder's cache.
    rotary=True rotates queries and keys by their positions (rotate_pairs, self-attention only);
    mistake: one of MISTAKES, "none" being the paper's attention.
    """

    def __init__(self, d_model, n_head, dropout=0.0, bias=True, rotary=False, mistake="none"):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        if rotary and (d_model // n_head) % 2:
            raise ValueError(f"rotary positions rotate pairs of dimensions: the head size {d_model // n_head} "
                             "must be even")
        if mistake not in MISTAKES:
            raise ValueError(f"mistake must be one of {', '.join(MISTAKES)}; got {mistake!r}")
        self.n_head = n_head
        self.d_head = d_model // n_head
        self.dropout = dropout
        self.rotary, self.mistake = rotary, mistake
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x):
        b, t, _ = x.shape
        if self.mistake == "no-transpose":
            return x.reshape(b, self.n_head, t, self.d_head)  # (B, H, T, Dh) in shape only: tokens mixed
        return x.view(b, t, self.n_head, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def merge_heads(self, x):
        b, _, t, _ = x.shape
        if self.mistake == "no-transpose":
            return x.reshape(b, t, self.n_head * self.d_head)  # the same mistake undone the same way
        return x.transpose(1, 2).reshape(b, t, self.n_head * self.d_head)  # (B, T, D)

    def project_kv(self, x):
        """Keys and values of x, split into heads: two (B, H, T_k, Dh) tensors."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, x, kv=None, mask=None, return_attention=False, head_mask=None):
        """x: (B, T_q, D), the queries' source; kv: (k, v) to attend over, each (B, H, T_k, Dh)
        (default: x's own, i.e. self-attention).

        head_mask: optional (H,) of 1 = keep, 0 = switch off. A switched-off head still attends
        (its weights are returned) but its output is zeroed before the heads are merged. It is an
        argument of the call, never module state, so concurrent callers cannot see each other's."""
        q = self.split_heads(self.q_proj(x))  # (B, H, T_q, Dh)
        k, v = kv if kv is not None else self.project_kv(x)  # (B, H, T_k, Dh) each
        if self.rotary:
            q, k = rotate_pairs(q, torch.arange(q.size(-2))), rotate_pairs(k, torch.arange(k.size(-2)))
        if self.mistake == "mask-query-axis" and mask is not None:
            mask = mask.transpose(-2, -1)
        scale = 1.0 if self.mistake == "no-scaling" else None
        p = self.dropout if self.training else 0.0
        if return_attention:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p, scale=scale)  # (B, H, T_q, Dh)
        else:
            # Nobody looks at the weights: PyTorch's fused kernel gives the same output without
            # materialising them, as the seed article advises for real code (tested equal to ours).
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=scale)
            weights = None
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).view(1, -1, 1, 1)
        return self.out_proj(self.merge_heads(out)), weights


def sinusoidal_positions(n, d):
    """(n, d) table: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same angle)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = pos * inv_freq  # (n, ceil(d/2))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d // 2])
    return pe


class FeedForward(nn.Sequential):
    """Position-wise feed-forward: Linear(D, d_ff) -> GELU -> Linear(d_ff, D)."""

    def __init__(self, d_model, d_ff):
        super().__init__(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))


class EncoderBlock(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FF(LN(x)).

    Normalising *before* each sublayer keeps the residual path an identity, which is what lets
    these models train at a high learning rate without a long warmup (Xiong et al. 2020). norm="post"
    is the original paper's block instead: LN(x + Attn(x)), then LN(x + FF(x)). Dropout acts on what
    each sublayer adds to the residual stream (`dropout`) and, optionally, on the attention weights
    (`attn_dropout`). rotary and mistake go to the attention (MultiHeadAttention).
    """

    def __init__(self, d_model, n_head, d_ff=None, dropout=0.0, attn_dropout=0.0, norm="pre", rotary=False,
                 mistake="none"):
        super().__init__()
        if norm not in ("pre", "post"):
            raise ValueError(f"norm must be pre or post; got {norm!r}")
        self.post_ln = norm == "post"
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_head, attn_dropout, rotary=rotary, mistake=mistake)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff or 4 * d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None, return_attention=False, head_mask=None):
        if self.post_ln:
            a, weights = self.attn(x, mask=mask, return_attention=return_attention, head_mask=head_mask)
            x = self.ln1(x + self.drop(a))
            return self.ln2(x + self.drop(self.ff(x))), weights
        a, weights = self.attn(self.ln1(x), mask=mask, return_attention=return_attention, head_mask=head_mask)
        x = x + self.drop(a)
        x = x + self.drop(self.ff(self.ln2(x)))
        return x, weights
