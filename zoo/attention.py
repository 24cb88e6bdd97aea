"""Attention from scratch: the building blocks every zoo model is made of.

Read top to bottom like the paper: scaled dot-product attention, masks, multi-head attention,
sinusoidal positions, the pre-LN encoder block. Shapes use B = batch, H = heads, T = tokens,
D = d_model, Dh = D / H.

Masks are boolean and True means "may attend". They broadcast against the score matrix
(B, H, T_q, T_k) and always act on the *key* axis: a query row decides which keys it may look at.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .packing import PACK_MIN_ELEMENTS, Linear, worth_packing


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """softmax(q k^T / sqrt(d_k)) v, returning the output and the attention weights.

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v); mask: bool, broadcastable to
    (..., T_q, T_k), True = may attend. Masked weights are exactly 0 and a fully masked row gives
    zero weights (and a zero output) instead of NaN. Dropout, when asked for, acts on the weights
    used for the output; the returned weights are the clean ones.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
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


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate q/k/v/out projections.

    forward() returns (out, weights); weights is (B, H, T_q, T_k) when return_attention=True, else
    None. For incremental decoding the caller may pass precomputed keys/values (`kv`, from
    project_kv), or project the queries, keys and values itself (project_qkv) and call attend(), so
    that a decoder can cache keys/values between steps.
    """

    def __init__(self, d_model, n_head, dropout=0.0, bias=True):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        self.n_head = n_head
        self.d_head = d_model // n_head
        self.dropout = dropout
        self.q_proj = Linear(d_model, d_model, bias=bias)
        self.k_proj = Linear(d_model, d_model, bias=bias)
        self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)
        self.packed_qkv = None  # set by pack()

    def pack(self, min_elements=PACK_MIN_ELEMENTS):
        """For inference, self-attention projects q, k and v in one product with the three weights
        side by side (zoo.packing); the four Linears pack themselves."""
        self.packed_qkv = worth_packing(3 * self.q_proj.weight.numel(), min_elements)
        return self

    def split_heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def merge_heads(self, x):
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.n_head * self.d_head)  # (B, T, D)

    def project_kv(self, x):
        """Keys and values of x, split into heads: two (B, H, T_k, Dh) tensors."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def project_qkv(self, x):
        """Queries, keys and values of x for self-attention: three (B, H, T, Dh) tensors."""
        if self.packed_qkv is not None:
            projections = (self.q_proj, self.k_proj, self.v_proj)
            qkv = self.packed_qkv(x, [p.weight for p in projections], [p.bias for p in projections])  # (B, T, 3 D)
            if qkv is not None:
                b, t, _ = qkv.shape
                qkv = qkv.view(b, t, 3, self.n_head, self.d_head).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
                return tuple(qkv.unbind(0))
        return self.split_heads(self.q_proj(x)), *self.project_kv(x)

    def forward(self, x, context=None, mask=None, kv=None, return_attention=False, head_mask=None):
        """x: (B, T_q, D) queries; context: (B, T_k, D) keys/values source (default x, i.e.
        self-attention); kv: precomputed (k, v) that replaces context."""
        if context is None and kv is None:
            q, k, v = self.project_qkv(x)
        else:
            q = self.split_heads(self.q_proj(x))  # (B, H, T_q, Dh)
            k, v = kv if kv is not None else self.project_kv(context)
        return self.attend(q, k, v, mask, return_attention, head_mask)

    def attend(self, q, k, v, mask=None, return_attention=False, head_mask=None):
        """Attention of projected, head-split q (B, H, T_q, Dh) over k, v (B, H, T_k, Dh), merged
        and projected back to (B, T_q, D).

        head_mask: optional (H,) of 1 = keep, 0 = switch off. An ablated head still attends (its
        weights are returned) but its output is zeroed before the heads are merged. It is an
        argument of the call, never module state, so concurrent callers cannot see each other's."""
        p = self.dropout if self.training else 0.0
        if q.size(-2) == 1 and not (return_attention or head_mask is not None or p):
            # One query (a decoding step) whose weights nobody looks at: PyTorch's fused kernel, one
            # call instead of five (9.6 against 16 us on 2 threads; a fully masked row gives zeros
            # here too). For 9-17 queries it was slower on 2 threads (47 against 29 us at 9).
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None  # (B, H, 1, Dh)
        else:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)  # (B, H, T_q, Dh)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).view(1, -1, 1, 1)
        return self.out_proj(self.merge_heads(out)), (weights if return_attention else None)


def sinusoidal_positions(n, d):
    """(n, d) table: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same angle)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = pos * inv_freq  # (n, ceil(d/2))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d // 2])
    return pe


def dropped(x, drop):
    """drop(x) (an nn.Dropout) in training; x itself in eval mode, where dropout is the identity, so
    inference skips the call (~4 us, paid about ten times per decoding step)."""
    return drop(x) if drop.training else x


class FeedForward(nn.Sequential):
    """Position-wise feed-forward: Linear(D, d_ff) -> GELU -> Linear(d_ff, D)."""

    def __init__(self, d_model, d_ff):
        super().__init__(Linear(d_model, d_ff), nn.GELU(), Linear(d_ff, d_model))

    def forward(self, x):
        up, gelu, down = self
        # The GELU is handed to the first product, which applies it inside the same oneDNN call when
        # its weight is packed (zoo.packing) and after F.linear otherwise: one operation fewer per
        # decoding step, the same (B, T, d_ff) activations.
        return down(up(x, gelu))


class EncoderBlock(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + FF(LN(x)).

    Normalising *before* each sublayer keeps the residual path an identity, which is what lets
    these models train at a high learning rate without a long warmup. Dropout acts on what each
    sublayer adds to the residual stream (`dropout`) and, optionally, on the attention weights
    (`attn_dropout`).
    """

    def __init__(self, d_model, n_head, d_ff=None, dropout=0.0, attn_dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_head, attn_dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff or 4 * d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None, return_attention=False, head_mask=None):
        a, weights = self.attn(self.ln1(x), mask=mask, return_attention=return_attention, head_mask=head_mask)
        x = x + dropped(a, self.drop)
        x = x + dropped(self.ff(self.ln2(x)), self.drop)
        return x, weights
