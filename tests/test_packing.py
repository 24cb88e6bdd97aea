"""zoo.packing: weights laid out for oneDNN give F.linear's results, and never stale or untrainable."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from zoo.attention import MultiHeadAttention
from zoo.packing import Linear, pack_for_inference
from zoo.translator import TransformerTranslator

ONEDNN = torch.backends.mkldnn.is_available()
needs_onednn = pytest.mark.skipif(not ONEDNN, reason="this PyTorch build has no oneDNN")


def seeded_linear(n_in, n_out, bias=True, seed=0):
    torch.manual_seed(seed)
    return Linear(n_in, n_out, bias=bias).eval()


@pytest.mark.parametrize("shape", [(5, 256), (5, 1, 256), (3, 7, 256), (1, 256)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_equals_f_linear(shape, bias):
    layer = seeded_linear(256, 300, bias)
    x = torch.randn(*shape)
    expected = F.linear(x, layer.weight, layer.bias)
    layer.pack()
    with torch.inference_mode():
        got = layer(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@needs_onednn
def test_packing_takes_the_onednn_path_only_for_inference():
    layer = seeded_linear(64, 32)
    layer.pack()
    x = torch.randn(4, 64)
    with torch.inference_mode():
        assert layer.packed.usable(x)
    with torch.no_grad():
        assert layer.packed.usable(x)
    assert not layer.packed.usable(x)  # autograd is recording and the weight wants a gradient
    assert not layer.packed.usable(x.double())
    assert not layer.packed.usable(x.bfloat16())


def test_a_packed_layer_still_trains():
    layer = seeded_linear(16, 8)
    layer.pack()
    x = torch.randn(4, 16)
    layer(x).sum().backward()
    torch.testing.assert_close(layer.weight.grad, torch.ones(8, 1) * x.sum(0))


@pytest.mark.parametrize("change", ["in-place weight", "in-place bias", "load_state_dict", "optimiser step"])
def test_a_changed_weight_is_never_served_stale(change):
    layer = seeded_linear(32, 16)
    layer.pack()
    if change == "in-place weight":
        with torch.no_grad():
            layer.weight.mul_(2)
    elif change == "in-place bias":
        with torch.no_grad():
            layer.bias.add_(1)
    elif change == "load_state_dict":
        layer.load_state_dict(seeded_linear(32, 16, seed=1).state_dict())
    else:
        layer.train()
        torch.optim.SGD(layer.parameters(), lr=0.5).zero_grad()
        layer(torch.randn(3, 32)).pow(2).sum().backward()
        torch.optim.SGD(layer.parameters(), lr=0.5).step()
        layer.eval()
    x = torch.randn(3, 32)
    with torch.inference_mode():
        got = layer(x)
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias))
    assert not layer.packed.usable(x)
    layer.pack()  # packing again brings the fast path back, with the new weights
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
        assert layer.packed.usable(x) == ONEDNN


def test_packing_keeps_parameters_and_state_dict():
    plain, ours = nn.Linear(8, 4), Linear(8, 4)
    assert list(plain.state_dict()) == list(ours.state_dict())
    model = TransformerTranslator(vocab_size=50, d_model=32, n_head=4, n_enc_layer=1, n_dec_layer=1, d_ff=64).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    n_params = model.num_parameters()
    assert pack_for_inference(model) is model
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert model.num_parameters() == n_params


def test_fused_qkv_projection_equals_three_projections():
    torch.manual_seed(0)
    attn = MultiHeadAttention(64, 4).eval()
    x = torch.randn(2, 5, 64)
    with torch.inference_mode():
        expected = (attn.split_heads(attn.q_proj(x)), *attn.project_kv(x))
        out_plain, w_plain = attn(x, return_attention=True)
        attn.pack()
        got = attn.project_qkv(x)
        out_packed, w_packed = attn(x, return_attention=True)
        assert attn.packed_qkv.usable(x) == ONEDNN
    for g, e in zip(got, expected):
        assert g.shape == (2, 4, 5, 16)
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_packed, out_plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w_packed, w_plain, atol=1e-5, rtol=1e-5)


def test_packed_translator_decodes_like_the_unpacked_one():
    config = {"vocab_size": 60, "d_model": 32, "n_head": 4, "n_enc_layer": 2, "n_dec_layer": 2, "d_ff": 64, "max_len": 32}
    torch.manual_seed(0)
    plain = TransformerTranslator(**config).eval()
    packed = TransformerTranslator(**config).eval()
    packed.load_state_dict(plain.state_dict())
    packed.pack()
    src = torch.tensor([[5, 9, 13, 21, 2], [7, 8, 2, 0, 0]])
    ids_plain, logits_plain = plain.greedy(src)
    ids_packed, logits_packed = packed.greedy(src)
    assert torch.equal(ids_plain, ids_packed)
    torch.testing.assert_close(logits_packed, logits_plain, atol=1e-4, rtol=1e-4)
    assert (packed.packed_head.packed is not None) == ONEDNN
