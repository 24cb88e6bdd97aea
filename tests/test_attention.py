"""zoo.attention against PyTorch's own attention, and the invariants of masks and positions."""

import math

import pytest
import torch
import torch.nn.functional as F

from zoo.attention import (
    EncoderBlock,
    MultiHeadAttention,
    causal_mask,
    key_padding_mask,
    scaled_dot_product_attention,
    sinusoidal_positions,
)
from zoo.basics import to_torch_mha

ATOL = 1e-6


def random_mask(b, tq, tk, seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(b, 1, tq, tk, generator=g) > 0.4
    m[..., 0] = True  # keep every row attending somewhere, as torch's reference needs
    return m


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "random"])
@pytest.mark.parametrize("tq,tk", [(5, 5), (3, 7)])
def test_sdpa_matches_torch(mask_kind, tq, tk):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, tq, 16), torch.randn(2, 4, tk, 16), torch.randn(2, 4, tk, 16)
    mask = {"none": None,
            "causal": causal_mask(max(tq, tk))[-tq:, :tk] if tq <= tk else None,
            "padding": key_padding_mask(torch.arange(tk)[None, :] < torch.tensor([[tk], [tk - 2]])),
            "random": random_mask(2, tq, tk, 1)}[mask_kind]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (2, 4, tq, 16) and w.shape == (2, 4, tq, tk)
    assert torch.allclose(out, ref, atol=ATOL)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, tq), atol=ATOL)
    if mask is not None:
        assert (w.masked_select(~mask.expand_as(w)) == 0).all()


@pytest.mark.parametrize("masking", ["none", "causal", "key_padding", "cross"])
def test_multihead_matches_nn_multiheadattention(masking):
    torch.manual_seed(1)
    d, h, b, t = 32, 4, 3, 6
    ours = MultiHeadAttention(d, h).eval()
    ref = to_torch_mha(ours)
    x = torch.randn(b, t, d)
    ctx = torch.randn(b, 9, d) if masking == "cross" else x
    kwargs, mask = {}, None
    if masking == "causal":
        mask = causal_mask(t)
        kwargs["attn_mask"] = ~mask  # torch: True = *not* allowed
    elif masking in ("key_padding", "cross"):
        valid = torch.arange(ctx.size(1))[None, :] < torch.tensor([[ctx.size(1)], [4], [2]])
        mask = key_padding_mask(valid)
        kwargs["key_padding_mask"] = ~valid
    out, w = ours(x, kv=None if masking != "cross" else ours.project_kv(ctx), mask=mask, return_attention=True)
    ref_out, ref_w = ref(x, ctx, ctx, need_weights=True, average_attn_weights=False, **kwargs)
    assert w.shape == (b, h, t, ctx.size(1))
    assert torch.allclose(out, ref_out, atol=ATOL)
    assert torch.allclose(w, ref_w, atol=ATOL)
    if mask is not None:
        assert (w.masked_select(~mask.expand_as(w)) == 0).all()


@pytest.mark.parametrize("t_q", [1, 5])
@pytest.mark.parametrize("lengths", [None, [9, 4, 2], [9, 4, 0]])
def test_fused_path_matches_our_attention(t_q, lengths):
    """Without maps, MultiHeadAttention takes PyTorch's fused kernel; it must give what our own
    attention gives when the maps are returned, a fully masked row (length 0) included."""
    torch.manual_seed(2)
    mha = MultiHeadAttention(32, 4).eval()
    x, ctx = torch.randn(3, t_q, 32), torch.randn(3, 9, 32)
    mask = None if lengths is None else key_padding_mask(torch.arange(9)[None, :] < torch.tensor(lengths)[:, None])
    fast, no_maps = mha(x, kv=mha.project_kv(ctx), mask=mask)
    full, w = mha(x, kv=mha.project_kv(ctx), mask=mask, return_attention=True)
    assert no_maps is None and w.shape == (3, 4, t_q, 9)
    assert torch.allclose(fast, full, atol=ATOL)


def test_weights_none_unless_asked():
    mha = MultiHeadAttention(16, 2).eval()
    out, w = mha(torch.randn(1, 3, 16))
    assert w is None and out.shape == (1, 3, 16)


def test_fully_masked_row_gives_zeros_not_nan():
    q = k = v = torch.randn(1, 1, 3, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert (w[0, 0, 1] == 0).all() and (out[0, 0, 1] == 0).all()
    out.sum().backward()
    assert not torch.isnan(q.grad).any()


def test_padding_mask_acts_on_keys():
    """Padded keys get zero weight from every query, real ones share all of it."""
    torch.manual_seed(2)
    valid = torch.tensor([[True, True, True, False, False]])
    x = torch.randn(1, 2, 5, 8)
    _, w = scaled_dot_product_attention(x, x, x, key_padding_mask(valid))
    assert (w[..., 3:] == 0).all()
    assert torch.allclose(w[..., :3].sum(-1), torch.ones(1, 2, 5), atol=ATOL)


def test_causal_mask_hides_the_future():
    x = torch.randn(1, 1, 6, 8)
    _, w = scaled_dot_product_attention(x, x, x, causal_mask(6))
    assert torch.equal(w[0, 0].triu(1), torch.zeros(6, 6))
    assert w[0, 0, 0, 0] == 1


@pytest.mark.parametrize("d,expected", [
    (32, [0.841, 0.540, 0.533, 0.846, 0.311, 0.950]),
    (64, [0.841, 0.540, 0.682, 0.732, 0.533, 0.846]),
])
def test_sinusoidal_positions_article_values(d, expected):
    pe = sinusoidal_positions(10, d)
    assert pe.shape == (10, d)
    assert [round(v, 3) for v in pe[1, :6].tolist()] == expected
    assert torch.equal(pe[0, 0::2], torch.zeros(d // 2)) and torch.equal(pe[0, 1::2], torch.ones(d // 2))


def test_sinusoidal_formula():
    pe = sinusoidal_positions(50, 16)
    pos, i = 37, 3
    angle = pos / 10000 ** (2 * i / 16)
    assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-5)
    assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-5)


def test_encoder_block_is_pre_ln_with_residuals():
    torch.manual_seed(3)
    block = EncoderBlock(16, 2, 64).eval()
    x = torch.randn(2, 5, 16)
    y, w = block(x, return_attention=True)
    a, _ = block.attn(block.ln1(x))
    h = x + a
    assert torch.allclose(y, h + block.ff(block.ln2(h)), atol=ATOL)
    assert w.shape == (2, 2, 5, 5)
    assert sum(p.numel() for p in block.parameters()) == 4 * (16 * 16 + 16) + 16 * 64 + 64 + 64 * 16 + 16 + 4 * 16
