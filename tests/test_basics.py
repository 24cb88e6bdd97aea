"""Attention basics tab: every panel's defaults against the article, and its errors."""

import math
import sys
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import torch

import zoo
from ui import basics as tab
from zoo import basics
from zoo.translator import TransformerTranslator

ARTICLE_WEIGHTS = [[0.320, 0.180, 0.320, 0.180],
                   [0.180, 0.320, 0.320, 0.180],
                   [0.230, 0.230, 0.410, 0.129],
                   [0.209, 0.209, 0.209, 0.373]]


# ----- 1. Q·K·V playground ----------------------------------------------------------------------

def test_qkv_defaults_reproduce_the_article():
    fig, table, outputs = tab.qkv(tab.DEFAULT_VECTORS, "", "")
    weights = table[[f"→ t{j}" for j in range(4)]].to_numpy()
    np.testing.assert_allclose(weights, ARTICLE_WEIGHTS, atol=1e-3)
    exact = basics.qkv_attention(basics.parse_vectors(tab.DEFAULT_VECTORS))["weights"]
    np.testing.assert_allclose(exact.numpy(), ARTICLE_WEIGHTS, atol=1e-3)
    assert table["row sum"].tolist() == pytest.approx([1.0] * 4, abs=1e-9)
    assert outputs.shape == (4, 4)  # "output of" + 3 dimensions
    assert np.shape(fig.data[0]["z"]) == (4, 4)


def test_qkv_is_softmax_of_scaled_scores_and_k_v_default_to_q():
    q = basics.parse_vectors("[1, 0, 0]\n0 1 0;(1,1,0)\n0, 0, 1")
    res = basics.qkv_attention(q)
    expected = (q @ q.T / math.sqrt(3)).softmax(-1)
    assert torch.allclose(res["weights"], expected, atol=1e-12)
    assert torch.allclose(res["output"], expected @ q, atol=1e-12)
    k = basics.parse_vectors("1 0 0\n0 1 0")
    v = basics.parse_vectors("5\n7")
    out = basics.qkv_attention(q, k, v)["output"]
    assert out.shape == (4, 1)


@pytest.mark.parametrize("q,k,v,message", [
    ("1 0 0\n0 1", "", "", "every vector needs the same length"),
    ("1 0 zero", "", "", "'zero' is not a number"),
    ("1 nan 0", "", "", "finite numbers"),
    ("1 1e9 0", "", "", "finite numbers from -1000 to 1000"),
    ("\n".join(["1 0"] * 13), "", "", "at most 12 are accepted"),
    (" ".join(["1"] * 17), "", "", "at most 16 are accepted"),
    ("  ", "", "", "Q is empty"),
    ("1 0 0\n0 1 0", "1 0", "", "need the same length"),
    ("1 0 0\n0 1 0", "", "1\n2\n3", "every key needs exactly one value"),
    ("1 " * 1500, "", "", "at most 2,000 are accepted"),
])
def test_qkv_bad_input_says_what_is_accepted(q, k, v, message):
    with pytest.raises(gr.Error, match=message):
        tab.qkv(q, k, v)


# ----- 2. Why divide by sqrt(d_k) ---------------------------------------------------------------

def test_scaling_at_64_matches_the_large_sample_figures():
    s = basics.scaling_stats(64)
    assert (s.n_queries, s.n_keys) == (2000, 64)
    assert s.std_raw == pytest.approx(8.00, abs=0.3)
    assert s.std_scaled == pytest.approx(1.00, abs=0.04)
    assert s.max_raw == pytest.approx(0.79, abs=0.03)
    assert s.max_scaled == pytest.approx(0.106, abs=0.01)
    assert basics.scaling_stats(64) == s  # deterministic


def test_scaling_panel_shows_measured_theory_and_article():
    s = basics.scaling_stats(64)
    table, std_fig, peak_fig, summary = tab.scaling(64)
    assert "2,000 queries" in table.columns[1]
    assert table.iloc[:, 1].tolist() == [f"{s.std_raw:.2f}", f"{s.std_scaled:.2f}", f"{s.max_raw:.3f}",
                                         f"{s.max_scaled:.3f}"]
    assert table["article (sampling not stated)"].tolist() == ["8.00", "1.00", "0.687", "0.096"]
    # Over the whole grid: unscaled spread follows sqrt(d_k), scaled stays at 1.
    for s in basics.scaling_curves():
        assert s.std_raw == pytest.approx(math.sqrt(s.d_k), rel=0.05)
        assert s.std_scaled == pytest.approx(1.0, abs=0.05)
    assert len(std_fig.data) == 4 and len(peak_fig.data) == 4  # 3 curves + the chosen d_k
    assert "d_k = 64" in summary


@pytest.mark.parametrize("d_k", [0, 1025, 2.5, "64", None, float("nan")])
def test_scaling_rejects_d_k_out_of_range(d_k):
    with pytest.raises(gr.Error, match="d_k must be a whole number from 1 to 1024"):
        tab.scaling(d_k)


# ----- 3. Masks ---------------------------------------------------------------------------------

def test_padding_mask_on_the_key_axis_hides_the_pads():
    res = basics.mask_demo(6, 2, wrong_axis=False)
    assert res["pad_mass"] == 0.0 and res["leak"] == 0.0
    assert res["pad_row_sums"].tolist() == pytest.approx([1.0, 1.0])
    assert torch.equal(res["causal"], torch.ones(6, 6, dtype=torch.bool).tril())
    assert (res["causal_weights"].triu(1) == 0).all()


def test_wrong_axis_is_quantified():
    res = basics.mask_demo(6, 2, wrong_axis=True)
    assert res["pad_mass"] > 0.1  # real tokens still attend to pads
    assert res["leak"] > 0.1  # and their outputs depend on what the pads contain
    assert res["pad_row_sums"].tolist() == [0.0, 0.0]  # the pads' rows are fully masked
    *figs, verdict = tab.masks(6, 2, True)
    assert len(figs) == 4 and f"{res['pad_mass']:.3f}" in verdict
    assert f"{res['leak']:.3f}" in verdict


@pytest.mark.parametrize("n_tokens,n_pad,message", [(1, 0, "tokens must be a whole number from 2 to 12"),
                                                    (13, 2, "from 2 to 12"), (6, 6, "from 0 to 5")])
def test_masks_reject_bad_sizes(n_tokens, n_pad, message):
    with pytest.raises(gr.Error, match=message):
        tab.masks(n_tokens, n_pad, False)


# ----- 4. Positional encoding -------------------------------------------------------------------

def test_positional_encoding_matches_the_article():
    pe = basics.positional_table(64, 32)
    assert pe.shape == (64, 32)
    assert pe[1, :6].tolist() == pytest.approx([0.841, 0.540, 0.533, 0.846, 0.311, 0.950], abs=5e-4)
    fig, probe = tab.positions(64, 32, 1)
    assert probe.iloc[0, 1:7].tolist() == ["0.841", "0.540", "0.533", "0.846", "0.311", "0.950"]
    assert np.shape(fig.data[0]["z"]) == (64, 32) and "%{z:.3f}" in fig.data[0]["hovertemplate"]


@pytest.mark.parametrize("n,d,pos,message", [(64, 33, 1, "must be even"), (64, 1024, 1, "from 2 to 512"),
                                             (0, 32, 0, "from 1 to 512"), (8, 32, 8, "from 0 to 7")])
def test_positions_reject_bad_sizes(n, d, pos, message):
    with pytest.raises(gr.Error, match=message):
        tab.positions(n, d, pos)


@pytest.mark.parametrize("d_model", [2, 32, 128])
def test_permutation_check(d_model):
    res = basics.permutation_check(d_model)
    assert res["without_pe"] < 1e-6
    assert res["with_pe"] > 1e-2
    table, _ = tab.permutation(d_model, 0)
    assert table["verdict"].tolist() == ["identical (float rounding)", "different"]


# ----- 5. The quadratic cost --------------------------------------------------------------------

def test_cost_measurement_fast_version():
    res = basics.attention_cost(lengths=(256, 512), repeats=1)
    assert [r["T"] for r in res["rows"]] == [256, 512] and res["skipped"] == []
    assert [r["score_mb"] for r in res["rows"]] == pytest.approx([4 * 256**2 * 4 / 1e6, 4 * 512**2 * 4 / 1e6])
    assert all(r["ours_s"] > 0 and r["torch_s"] > 0 for r in res["rows"])


def test_cost_caps_memory_and_time():
    assert basics.attention_cost(lengths=(4096,), budget_s=0.0)["rows"] == []  # nothing fits in no time
    res = basics.attention_cost(lengths=(256, 8192), repeats=1)  # 8192: a 1,074 MB score matrix
    assert [r["T"] for r in res["rows"]] == [256]
    assert res["skipped"][0][0] == 8192 and "300 MB cap" in res["skipped"][0][1]
    # The cap is on B*H*T*T*4 bytes: at T = 512 and 4 heads, 4.19 MB.
    assert [r["T"] for r in basics.attention_cost(lengths=(512,), repeats=1, max_mb=4.2)["rows"]] == [512]
    assert basics.attention_cost(lengths=(512,), repeats=1, max_mb=4.1)["skipped"][0][0] == 512


# ----- 6. Verification --------------------------------------------------------------------------

@pytest.mark.parametrize("masking", basics.MASKINGS)
def test_verification_against_torch(masking):
    diffs = basics.verify_against_torch(0, masking)
    assert len(diffs) == 3 and all(d < 1e-5 for _, d in diffs)
    assert tab.verify(3, masking)["verdict"].tolist() == ["match"] * 3


@pytest.mark.parametrize("seed,masking,message", [(-1, "none", "seed must be"), (0, "diagonal", "choose one of")])
def test_verification_rejects_bad_input(seed, masking, message):
    with pytest.raises(gr.Error, match=message):
        tab.verify(seed, masking)


# ----- 7. Parameter accounting ------------------------------------------------------------------

SORTER_PARTS = {"embeddings": 640, "attention": 2 * 16_640, "feed-forward": 2 * 33_088, "norms": 2 * 256,
                "head": 650}


def test_sorter_parameter_breakdown():
    from zoo.sorter import DigitSorter

    counts = basics.parameter_breakdown(DigitSorter())
    assert counts == SORTER_PARTS and sum(counts.values()) == 101_258


def test_translator_head_is_tied_to_the_embedding():
    net = TransformerTranslator(vocab_size=50, d_model=16, n_head=2, n_enc_layer=1, n_dec_layer=1, d_ff=32)
    counts = basics.parameter_breakdown(net)
    assert counts["head"] == 0 and counts["embeddings"] == 50 * 16
    assert sum(counts.values()) == net.num_parameters()


def test_parameter_panel_lists_every_zoo_model():
    table, fig, notes = tab.parameters()
    assert table["model"].tolist()[: len(zoo.available())] == list(zoo.available())
    rows = table.set_index("model")
    for name in ("sorter-pe", "sorter-nope"):
        if name in zoo.available():
            assert rows.loc[name, "total"] == "101,258"
            assert rows.loc[name, "attention"] == "33,280 (32.9%)"
    if "translator-en-de" in zoo.available():
        assert "tied" in notes
    assert "PhoBERT" in notes or "PhoBERT" in rows.index


def test_phobert_is_listed_only_when_already_loaded(monkeypatch):
    monkeypatch.delitem(sys.modules, "zoo.phobert", raising=False)
    assert tab.phobert_counts()[0] is None  # never imported: not listed, and not imported here
    assert "zoo.phobert" not in sys.modules
    base = {"total": 134_998_272, "embeddings": 49_353_216, "blocks": 85_054_464, "n_blocks": 12,
            "per_block_attention": 2_362_368, "per_block_feed_forward": 4_722_432, "per_block_layer_norm": 3_072}
    explorer = SimpleNamespace(model=None, breakdown=lambda: base)
    fake = SimpleNamespace(explorer=lambda: explorer)
    monkeypatch.setitem(sys.modules, "zoo.phobert", fake)
    assert tab.phobert_counts()[0] is None  # imported but not loaded
    explorer.model = object()
    counts, note = tab.phobert_counts()
    assert sum(counts.values()) == 134_998_272 and counts["head"] == 590_592  # the pooler
    assert counts["attention"] == 12 * 2_362_368 and "pooler" in note
    table, _, _ = tab.parameters()
    assert table.set_index("model").loc["PhoBERT", "total"] == "134,998,272"


# ----- the tab --------------------------------------------------------------------------------

def test_build_wires_named_endpoints_and_renders_every_panel():
    with gr.Blocks() as demo:
        with gr.Tabs():
            part = tab.build(demo)
    config = demo.get_config_file()
    public = {d["api_name"] for d in config["dependencies"] if d["api_visibility"] == "public"}
    assert public == {"basics_qkv", "basics_scaling", "basics_masks", "basics_positions", "basics_permutation",
                      "basics_shift", "basics_cost", "basics_verify", "basics_params"}
    assert not [d for d in config["dependencies"] if any(t[1] == "load" for t in d["targets"])]  # nothing on page load
    render, inputs, outputs = part["render"]
    view = render(*[c.value for c in inputs])
    assert len(view) == len(outputs) == 3 + 4 + 5 + 2 + 2 + 2 + 1 + 3  # every panel but the cost, measured on request
    ids = [c.elem_id for c in outputs]
    assert {"basics-qkv-weights", "basics-scale-table", "basics-mask-weights", "basics-pe-heatmap",
            "basics-perm-table", "basics-verify-table", "basics-params-table"} <= set(ids)
    weights = view[ids.index("basics-qkv-table")]
    np.testing.assert_allclose(weights[[f"→ t{j}" for j in range(4)]].to_numpy(), ARTICLE_WEIGHTS, atol=1e-3)


# ----- 4b. Relative positions -----------------------------------------------------------------

@pytest.mark.parametrize("k,d", [(1, 32), (5, 64), (40, 8)])
def test_a_fixed_linear_map_shifts_every_position(k, d):
    """The lesson's claim: PE[pos + k] = M_k PE[pos] with one M_k for all positions, built from the
    formula (rotations), exact up to float32 rounding; and M_k is orthogonal (it only rotates)."""
    res = basics.relative_shift(k, d, 100)
    m = res["matrix"]
    assert m.shape == (d, d) and res["residual"].shape == (100,)
    assert res["max_residual"] < 1e-5
    assert torch.allclose(m @ m.T, torch.eye(d, dtype=m.dtype), atol=1e-12)
    pe = basics.positional_table(200, d).double()
    assert not torch.allclose(pe[k: k + 100], pe[:100], atol=1e-3)  # the positions did move
    other = basics.shift_matrix(k + 1, d)
    assert (pe[:100] @ other.T - pe[k: k + 100]).abs().max() > 1e-2  # and only M_k moves them by k


def test_shift_panel_says_how_exact():
    fig, summary = tab.shift(5, 32, 64)
    assert np.shape(fig.data[0]["z"]) == (32, 32) and "1 steps" not in summary
    assert "5 steps on" in summary and "e-0" in summary
    with pytest.raises(gr.Error, match="The offset k must be a whole number from 1 to 512"):
        tab.shift(0)
