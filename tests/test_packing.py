"""zoo.packing: weights laid out for oneDNN give F.linear's results, and are never stale or untrainable."""

import copy
import io
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.attention import FeedForward, MultiHeadAttention
from zoo.packing import PACK_MIN_ELEMENTS, Linear, onednn_ready, pack_for_inference
from zoo.sorter import DigitSorter
from zoo.translator import TransformerTranslator

ONEDNN = onednn_ready()
# Tests of the mechanism pack every weight, however small (pack(0)); zoo.load packs only weights of at
# least PACK_MIN_ELEMENTS, where oneDNN is faster (test_zoo_packs_only_the_weights_where_it_pays).
TINY = {"vocab_size": 60, "d_model": 32, "n_head": 4, "n_enc_layer": 2, "n_dec_layer": 2, "d_ff": 64, "max_len": 32}


def seeded_linear(n_in, n_out, bias=True, seed=0):
    torch.manual_seed(seed)
    return Linear(n_in, n_out, bias=bias).eval()


def served_packed(layer):
    """Whether the layer has a oneDNN copy of its current weights (made by a call that used it)."""
    return layer.packed.state is not None and layer.packed.state.sources[0] is layer.weight


@pytest.mark.parametrize("shape", [(5, 256), (5, 1, 256), (3, 7, 256), (1, 256)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_equals_f_linear(shape, bias):
    layer = seeded_linear(256, 300, bias).pack(0)
    x = torch.randn(*shape)
    with torch.inference_mode():
        got = layer(x)
    assert served_packed(layer) == ONEDNN
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)


def test_packing_serves_inference_only(monkeypatch):
    layer = seeded_linear(64, 32).pack(0)
    x = torch.randn(4, 64)
    layer(x).sum().backward()  # autograd recording: the plain path, with gradients
    assert layer.packed.state is None and layer.weight.grad is not None
    with torch.no_grad():
        layer.double()(x.double())  # a float64 layer: the plain path
    assert layer.packed.state is None
    with torch.inference_mode():
        layer.float()(x)
    assert served_packed(layer) == ONEDNN
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    layer.packed.state = None
    with torch.inference_mode():
        layer(x)
    assert layer.packed.state is None  # oneDNN switched off: the plain path


def test_a_layer_made_under_inference_mode_runs_plain_products():
    with torch.inference_mode():  # its parameters are inference tensors, whose edits have no version
        layer = seeded_linear(16, 8).pack(0)
        x = torch.randn(3, 16)
        got = layer(x)
    assert layer.packed.state is None
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias))


def test_an_input_that_wants_a_gradient_gets_one_through_frozen_weights():
    layer = seeded_linear(16, 8).pack(0).requires_grad_(False)
    x = torch.randn(4, 16, requires_grad=True)
    layer(x).sum().backward()
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(4, 16))
    assert layer.packed.state is None


def test_a_frozen_weight_with_a_trainable_bias_still_gets_gradients():
    layer = seeded_linear(16, 8).pack(0)
    layer.weight.requires_grad_(False)
    x = torch.randn(4, 16)
    layer(x).sum().backward()
    torch.testing.assert_close(layer.bias.grad, torch.full((8,), 4.0))


@pytest.mark.parametrize("change", ["in place", "load_state_dict", "load_state_dict assign", "optimiser step",
                                    ".data", "new Parameter", "dtype round trip"])
def test_a_changed_weight_is_never_served_stale(change):
    layer = seeded_linear(32, 16).pack(0)
    x = torch.randn(3, 32)
    with torch.inference_mode():
        layer(x)  # makes the packed copy
    other = seeded_linear(32, 16, seed=1).state_dict()
    if change == "in place":
        with torch.no_grad():
            layer.weight.mul_(2)
            layer.bias.add_(1)
    elif change.startswith("load_state_dict"):
        layer.load_state_dict(other, assign=change.endswith("assign"))
    elif change == "optimiser step":
        optimiser = torch.optim.SGD(layer.parameters(), lr=0.5)
        layer(torch.randn(3, 32)).pow(2).sum().backward()
        optimiser.step()
    elif change == ".data":
        layer.weight.data = other["weight"].clone()
    elif change == "new Parameter":
        layer.weight = nn.Parameter(other["weight"].clone())
    else:
        layer.half().float()
    with torch.inference_mode():
        got = layer(x)
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    assert served_packed(layer) == ONEDNN  # a fresh copy of the new weights


def test_packed_models_copy_and_pickle():
    model = TransformerTranslator(**TINY).eval().pack(0)
    src = torch.tensor([[5, 9, 13, 2]])
    expected = model.greedy(src)[0]
    assert model.packed_head.state is not None or not ONEDNN
    clone = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    for other in (clone, restored):
        assert other.packed_head.state is None  # made again on first use, from its own weights
        assert torch.equal(other.greedy(src)[0], expected)
        assert (other.packed_head.state is not None) == ONEDNN
        assert other.packed_head.state is None or other.packed_head.state.sources[0] is other.embed.weight


def test_packing_keeps_parameters_and_state_dict():
    assert list(nn.Linear(8, 4).state_dict()) == list(Linear(8, 4).state_dict())
    model = TransformerTranslator(**TINY).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    n_params = model.num_parameters()
    assert pack_for_inference(model, 0) is model
    model.greedy(torch.tensor([[5, 9, 2]]))
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
        attn.pack(0)
        got = attn.project_qkv(x)
        out_packed, w_packed = attn(x, return_attention=True)
    assert (attn.packed_qkv.state is not None) == ONEDNN
    for g, e in zip(got, expected):
        assert g.shape == (2, 4, 5, 16)
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_packed, out_plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w_packed, w_plain, atol=1e-5, rtol=1e-5)


def test_only_the_paths_a_model_takes_are_packed():
    model = TransformerTranslator(**TINY).eval().pack(0)
    model.greedy(torch.tensor([[5, 9, 13, 2]]))
    if not ONEDNN:
        return
    for block in model.decoder:  # self-attention: one fused copy; cross-attention: its own Linears
        assert block.self_attn.packed_qkv.state is not None and block.self_attn.q_proj.packed.state is None
        assert block.cross_attn.packed_qkv.state is None and block.cross_attn.q_proj.packed.state is not None


def test_pack_keeps_small_weights_on_f_linear():
    small, large = Linear(256, 256).pack(), Linear(256, 512).pack()  # 65,536 and 131,072 elements
    assert small.packed is None and large.packed is not None
    assert PACK_MIN_ELEMENTS == 512 * 256
    attn = MultiHeadAttention(64, 4).pack()  # q, k, v together: 12,288 elements
    assert attn.packed_qkv is None


@pytest.mark.skipif("sorter-pe" not in zoo.available(), reason="sorter not trained yet")
def test_zoo_packs_only_the_weights_where_it_pays():
    sorter = zoo.load("sorter-pe")  # d_model 64: every product stays with F.linear
    assert not [m for m in sorter.modules() if getattr(m, "packed", None) or getattr(m, "packed_qkv", None)]
    plain = DigitSorter.from_pretrained(zoo.checkpoint_dir("sorter-pe"))
    x = torch.randint(0, 10, (256, 8), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(sorter(x), plain(x), atol=1e-5, rtol=1e-5)
    if "translator-en-de" not in zoo.available():
        return
    translator = zoo.load("translator-en-de")  # d_model 256, d_ff 1024, 8000 subwords
    assert translator.packed_head is not None
    for block in translator.decoder:
        assert block.self_attn.packed_qkv is not None  # q, k and v side by side: 196,608 elements
        assert block.ff[0].packed is not None and block.ff[2].packed is not None
        for attn in (block.self_attn, block.cross_attn):  # 256 x 256 each
            assert all(getattr(attn, n).packed is None for n in ("q_proj", "k_proj", "v_proj", "out_proj"))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_feed_forward_applies_its_gelu_inside_the_packed_product(approximate):
    torch.manual_seed(0)
    ff = FeedForward(32, 64).eval()
    ff[1] = nn.GELU(approximate=approximate)
    x = torch.randn(2, 5, 32)
    with torch.inference_mode():
        expected = ff[2](ff[1](ff[0](x)))  # each step on its own, plain products
        pack_for_inference(ff, 0)
        got = ff(x)
    assert (ff[0].packed.state is not None) == ONEDNN
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_an_activation_onednn_cannot_fuse_runs_after_the_product():
    layer = seeded_linear(16, 8).pack(0)
    x = torch.randn(4, 16)
    with torch.inference_mode():
        got = layer(x, nn.ReLU())
    assert layer.packed.state is None  # not served: ReLU is not offered as a post-op here
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias).relu())


def test_fused_and_tied_copies_follow_each_of_their_sources():
    model = TransformerTranslator(**TINY).eval().pack(0)
    src = torch.tensor([[5, 9, 13, 2]])
    model.greedy(src)
    with torch.no_grad():
        model.decoder[0].self_attn.k_proj.weight.mul_(1.5)  # one third of a fused q/k/v copy
        model.embed.weight.mul_(0.5)  # the tied output projection
    plain = TransformerTranslator(**TINY).eval()
    plain.load_state_dict(model.state_dict())
    ids, logits = model.greedy(src)
    ids_plain, logits_plain = plain.greedy(src)
    assert torch.equal(ids, ids_plain)
    torch.testing.assert_close(logits, logits_plain, atol=1e-5, rtol=1e-5)


def test_projections_with_and_without_bias_fall_back_to_plain_products():
    attn = MultiHeadAttention(32, 4).eval().pack(0)
    attn.k_proj.bias = None
    x = torch.randn(2, 3, 32)
    with torch.inference_mode():
        got = attn.project_qkv(x)
        expected = (attn.split_heads(F.linear(x, attn.q_proj.weight, attn.q_proj.bias)),
                    attn.split_heads(F.linear(x, attn.k_proj.weight)),
                    attn.split_heads(F.linear(x, attn.v_proj.weight, attn.v_proj.bias)))
    assert attn.packed_qkv.state is None
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_concurrent_requests_share_one_packed_model():
    model = TransformerTranslator(**TINY).eval().pack(0)
    plain = TransformerTranslator(**TINY).eval()
    plain.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(0)
    sources = [torch.randint(3, 60, (2, n), generator=g) for n in range(3, 11)] * 4
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda src: model.beam_search(src, 3), sources))
    assert got == [plain.beam_search(src, 3) for src in sources]
