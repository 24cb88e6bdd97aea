"""Attention basics tab: the mechanism before the models, each panel computed live.

Seven panels, each a plain callback (usable from tests and the API) and then `build(demo)`, which
lays them out and wires them: the Q·K·V playground, why divide by sqrt(d_k), masks, positional
encoding, the quadratic cost, our attention against PyTorch's, and parameter accounting. The
defaults are the article's figures, so a reader can check them. The computations live in
zoo/basics.py; this module only turns their results into tables, figures and sentences.
"""

from __future__ import annotations

import sys
import threading
import time

import gradio as gr
import numpy as np
import pandas as pd

import zoo
from ui import plots
from ui.common import model, on, user_errors
from zoo import basics

DEFAULT_VECTORS = "\n".join("[" + ", ".join(map(str, v)) + "]" for v in basics.ARTICLE_VECTORS)
ARTICLE_WEIGHTS = "0.320/0.180/0.320/0.180, 0.180/0.320/0.320/0.180, 0.230/0.230/0.410/0.129, 0.209/0.209/0.209/0.373"
PART_COLORS = {"embeddings": "#4c78a8", "attention": "#f58518", "feed-forward": "#54a24b", "norms": "#b279a2",
               "head": "#e45756", "other": "#9d9d9d"}


def blank(text):
    return text is None or (isinstance(text, str) and not text.strip())


def fmt_sci(x):
    return f"{x:.1e}"


# ----- 1. Q·K·V playground ----------------------------------------------------------------------

@user_errors
def qkv(q_text, k_text="", v_text=""):
    """/basics_qkv: vectors typed one per line -> weight heatmap, weights with row sums, output.

    K and V left blank mean "same as Q" (and V blank with K given means "same as K")."""
    q = basics.parse_vectors(q_text, "Q")
    k = None if blank(k_text) else basics.parse_vectors(k_text, "K")
    v = None if blank(v_text) else basics.parse_vectors(v_text, "V")
    res = basics.qkv_attention(q, k, v)
    w = res["weights"].numpy()
    q_tok = [f"t{i}" for i in range(w.shape[0])]
    k_tok = [f"t{j}" for j in range(w.shape[1])]
    fig = plots.attention_heatmap(w, q_tok, k_tok, f"softmax(Q·Kᵀ / √{q.size(1)})")
    table = pd.DataFrame(w.round(3), columns=[f"→ {t}" for t in k_tok])
    table.insert(0, "query", q_tok)
    table["row sum"] = res["row_sums"].numpy().round(3)
    out = res["output"].numpy()
    outputs = pd.DataFrame(out.round(3), columns=[f"dim {i}" for i in range(out.shape[1])])
    outputs.insert(0, "output of", q_tok)
    return fig, table, outputs


# ----- 2. Why divide by sqrt(d_k) ---------------------------------------------------------------

def scaling_figures(d_k, curves, point):
    """Two curves over d_k: the scores' spread (log-log) and how peaked the softmax is."""
    dims = [s.d_k for s in curves]
    std = plots.line_chart(dims, {"q·k": [s.std_raw for s in curves],
                                  "q·k / √d_k": [s.std_scaled for s in curves],
                                  "√d_k (theory)": np.sqrt(dims)},
                           "Standard deviation of the scores", "d_k", "std", log_x=True, log_y=True,
                           dash={"√d_k (theory)"})
    peak = plots.line_chart(dims, {"q·k": [s.max_raw for s in curves],
                                   "q·k / √d_k": [s.max_scaled for s in curves],
                                   f"uniform (1/{point.n_keys})": [1 / point.n_keys] * len(dims)},
                            f"Mean largest softmax weight over {point.n_keys} keys", "d_k", "weight",
                            log_x=True, dash={f"uniform (1/{point.n_keys})"})
    for fig, ys in ((std, (point.std_raw, point.std_scaled)), (peak, (point.max_raw, point.max_scaled))):
        fig.data.append(plots.points([d_k, d_k], ys, f"d_k = {d_k}"))
    return std, peak


@user_errors
def scaling(d_k=64):
    """/basics_scaling: measured spread and peakedness at d_k, theory, the article, and the curves."""
    s = basics.scaling_stats(d_k)

    def article(key, spec):
        return f"{basics.ARTICLE_SCALING[key]:{spec}}" if s.d_k == 64 else "— (printed for d_k = 64 only)"

    measured = f"measured ({s.n_queries:,} queries × {s.n_keys} keys, seed 0)"
    table = pd.DataFrame([
        ["std of q·k (unscaled)", f"{s.std_raw:.2f}", f"{np.sqrt(s.d_k):.2f} (√d_k)", article("std_raw", ".2f")],
        ["std of q·k / √d_k", f"{s.std_scaled:.2f}", "1.00", article("std_scaled", ".2f")],
        ["mean largest weight (unscaled)", f"{s.max_raw:.3f}", "—", article("max_raw", ".3f")],
        ["mean largest weight (scaled)", f"{s.max_scaled:.3f}", "—", article("max_scaled", ".3f")],
    ], columns=["quantity", measured, "theory", "article (sampling not stated)"])
    std, peak = scaling_figures(s.d_k, basics.scaling_curves(), s)
    summary = (f"At d_k = {s.d_k} the raw dot products spread with std {s.std_raw:.2f}; a softmax over "
               f"{s.n_keys} such scores gives its largest weight {s.max_raw:.3f} on average, close to one-hot "
               f"(and one-hot softmaxes pass almost no gradient). Dividing by √d_k brings the spread back to "
               f"{s.std_scaled:.2f} and the largest weight to {s.max_scaled:.3f} (uniform would be "
               f"{1 / s.n_keys:.3f}), whatever d_k is.")
    return table, std, peak, summary


# ----- 3. Masks ---------------------------------------------------------------------------------

@user_errors
def masks(n_tokens=6, n_pad=2, wrong_axis=False):
    """/basics_masks: the causal and padding masks and the weights they produce, right or wrong axis."""
    res = basics.mask_demo(n_tokens, n_pad, bool(wrong_axis))
    valid = res["valid"].tolist()
    tokens = [f"t{i}" if ok else "<pad>" for i, ok in enumerate(valid)]
    mask_map = lambda m, title: plots.grid_heatmap(  # noqa: E731
        m.float().numpy(), tokens, tokens, title, "key", "query", zmin=0, zmax=1, fmt=".0f",
        colorbar_title="may attend")
    where = "query axis (wrong)" if wrong_axis else "key axis (right)"
    figs = (mask_map(res["causal"], "Causal mask: query i sees keys 0..i"),
            mask_map(res["padding"], f"Padding mask on the {where}"),
            plots.attention_heatmap(res["weights"].numpy(), tokens, tokens, "Weights with the padding mask"),
            plots.attention_heatmap(res["causal_weights"].numpy(), tokens, tokens,
                                    "Weights with causal + padding masks"))
    pad_rows = ", ".join(f"{x:.0f}" for x in res["pad_row_sums"].tolist()) or "none"
    if all(valid):
        verdict = "There is no padding, so the two axes give the same result. Add some padding tokens."
    elif wrong_axis:
        verdict = (f"**What goes wrong:** the real tokens still attend to the padding — on average "
                   f"**{res['pad_mass']:.3f}** of each real token's weight lands on `<pad>` keys — and changing "
                   f"what the padding contains changes the real tokens' outputs by up to **{res['leak']:.3f}**. "
                   f"Meanwhile the padding's own rows are fully masked (row sums: {pad_rows}): our attention "
                   "returns all-zero rows there, a naive −∞ mask would return NaN. In the causal map the bug "
                   "hides: with padding at the end, a real token never reaches a pad anyway, which is why it "
                   "tends to surface in encoders first.")
    else:
        verdict = (f"**Right axis:** the real tokens put {res['pad_mass']:.3f} of their weight on `<pad>` keys, "
                   f"and changing the padding's contents changes their outputs by {res['leak']:.3f}: the padding "
                   f"is invisible. The padding queries still get a row each (row sums: {pad_rows}); it is "
                   "meaningless and the loss ignores it.")
    return (*figs, verdict)


# ----- 4. Positional encoding -------------------------------------------------------------------

def positions_figure(pe):
    """(positions, dims) sinusoidal table as a diverging heatmap: values are signed, -1..1."""
    n, d = pe.shape
    heat = {"type": "heatmap", "z": np.round(pe, 4).tolist(), "x": list(range(d)), "y": list(range(n)), "zmin": -1,
            "zmax": 1, "zmid": 0, "colorscale": plots.DIVERGING, "reversescale": True,
            "colorbar": {"title": {"text": "value"}, "thickness": 12},
            "hovertemplate": "position %{y}, dimension %{x}: %{z:.3f}<extra></extra>"}
    return plots.Figure(data=[heat], layout=plots.layout(
        f"Sinusoidal positional encoding, {n} positions × d_model = {d}",
        "dimension (even: sin, odd: cos; frequency falls to the right)", "position",
        height=min(640, max(320, 6 * n + 160)), yaxis={"autorange": "reversed"}))


@user_errors
def positions(n_positions=64, d_model=32, position=1):
    """/basics_positions: the sinusoidal table as a heatmap, and one position's first dimensions."""
    pe = basics.positional_table(n_positions, d_model).numpy()
    row = basics.whole_number(position, "The position to read", 0, pe.shape[0] - 1)
    dims = range(min(8, pe.shape[1]))
    probe = pd.DataFrame([[f"{pe[row, i]:.3f}" for i in dims]],
                         columns=[f"dim {i} ({'sin' if i % 2 == 0 else 'cos'})" for i in dims])
    probe.insert(0, "position", row)
    return positions_figure(pe), probe


@user_errors
def shift(k=5, d_model=32, n_positions=64):
    """/basics_shift: the matrix that moves every position k steps on, and how exactly it does."""
    res = basics.relative_shift(k, d_model, n_positions)
    m = res["matrix"].numpy()
    d = m.shape[0]
    heat = {"type": "heatmap", "z": np.round(m, 4).tolist(), "zmin": -1, "zmax": 1, "zmid": 0,
            "colorscale": plots.DIVERGING, "reversescale": True, "colorbar": {"thickness": 12},
            "hovertemplate": "row %{y}, column %{x}: %{z:.4f}<extra></extra>"}
    fig = plots.Figure(data=[heat], layout=plots.layout(
        f"M_{int(k)}: PE[pos + {int(k)}] = M · PE[pos], for every pos (d_model = {d})", "dimension of PE[pos]",
        "dimension of PE[pos + k]", height=min(620, 12 * d + 160), yaxis={"autorange": "reversed"}))
    summary = (f"One fixed matrix, a 2 × 2 rotation by k·w_i for each sine/cosine pair, takes every position's "
               f"encoding to the one {int(k)} steps on: over positions 0 to {res['residual'].numel() - 1} the largest "
               f"difference between M·PE[pos] and PE[pos + {int(k)}] is **{res['max_residual']:.1e}** (float32 "
               "rounding of the table). Because the map is linear and the same everywhere, a layer can learn "
               "\"k steps back\" once and use it at any position: the lesson's claim, checked.")
    return fig, summary


@user_errors
def permutation(d_model=32, seed=0):
    """/basics_permutation: permute, attend, un-permute, with and without positional encoding."""
    res = basics.permutation_check(d_model, seed=seed)
    table = pd.DataFrame([["without positional encoding", fmt_sci(res["without_pe"]),
                           "identical (float rounding)" if res["without_pe"] < 1e-5 else "different"],
                          ["with positional encoding", fmt_sci(res["with_pe"]),
                           "different" if res["with_pe"] > 1e-3 else "identical"]],
                         columns=["input", "max |difference| after un-permuting", "verdict"])
    summary = (f"Shuffled 8 random tokens with the permutation {res['perm']}, ran one attention head "
               f"(d_model = {int(d_model)}, seed {int(seed)}) and put the outputs back in the original order. Without "
               "positions, attention cannot tell the orders apart: every token gets the same output wherever it "
               "sits. Adding the sinusoids makes each output depend on the slot as well.")
    return table, summary


# ----- 5. The quadratic cost --------------------------------------------------------------------

COST_REUSE_SECONDS = 60
_cost = {"at": -float("inf"), "result": None}
_cost_lock = threading.Lock()


def measured_cost(progress=None):
    """basics.attention_cost(), re-measured at most once a minute: the measurement keeps a CPU busy
    for seconds, so repeated clicks (by anyone) within a minute share one run."""
    with _cost_lock:
        if time.monotonic() - _cost["at"] > COST_REUSE_SECONDS:
            _cost["result"], _cost["at"] = basics.attention_cost(progress=progress), time.monotonic()
        return _cost["result"], time.monotonic() - _cost["at"]


@user_errors
def cost(progress=gr.Progress()):
    """/basics_cost: time and score-matrix memory of one attention layer for T = 256 ... 4096. The
    run is one at a time for the whole server: others wait in the queue and see their place; the
    one measuring sees which length it is at."""
    res, age = measured_cost(lambda fraction, what: progress(fraction, desc=f"Measuring {what}"))
    rows = res["rows"]
    ts = [r["T"] for r in rows]
    ours = [1e3 * r["ours_s"] for r in rows]
    fused = [1e3 * r["torch_s"] for r in rows]
    mem = [r["score_mb"] for r in rows]
    # The reference goes through the largest T, the least noisy timing: 4x per doubling of T.
    quad = lambda y: [y[-1] * (t / ts[-1]) ** 2 for t in ts]  # noqa: E731
    time_fig = plots.line_chart(ts, {"ours (materialises T×T)": ours, "F.scaled_dot_product_attention": fused,
                                     "4× per doubling": quad(ours)},
                                "Time of one attention layer (4 heads, d = 64)", "sequence length T", "ms",
                                log_x=True, log_y=True, dash={"4× per doubling"})
    mem_fig = plots.line_chart(ts, {"score matrix (ours)": mem, "4× per doubling": quad(mem)},
                               "Score-matrix memory, B·H·T·T·4 bytes", "sequence length T", "MB",
                               log_x=True, log_y=True, dash={"4× per doubling"})
    table = pd.DataFrame([[t, f"{a:.2f}", f"{b:.2f}", "" if i == 0 else f"{a / ours[i - 1]:.1f}×", f"{m:.1f}"]
                          for i, (t, a, b, m) in enumerate(zip(ts, ours, fused, mem, strict=True))],
                         columns=["T", "ours (ms)", "F.sdpa (ms)", "ours vs previous T", "score matrix (MB)"])
    skipped = "; ".join(f"T = {t} skipped: {why}" for t, why in res["skipped"])
    summary = ("Median of 3 runs per length, batch 1, 4 heads × 16 dims, on this machine's CPU. Ours builds the "
               "whole T×T score matrix (and a softmax of the same size), so time and memory grow about 4× each "
               "time T doubles. `F.scaled_dot_product_attention` runs a fused flash / memory-efficient kernel "
               "that works through the keys block by block and never materialises the matrix: the arithmetic is "
               "still quadratic, the memory is not." + (f"\n\n{skipped}." if skipped else "")
               + (f"\n\nMeasured {age:.0f} s ago (one measurement serves all requests for "
                  f"{COST_REUSE_SECONDS} s)." if age >= 1 else ""))
    return time_fig, mem_fig, table, summary


# ----- 6. Verification --------------------------------------------------------------------------

@user_errors
def verify(seed=0, masking="none"):
    """/basics_verify: ours vs nn.MultiheadAttention vs F.scaled_dot_product_attention, same weights."""
    diffs = basics.verify_against_torch(seed, masking)
    table = pd.DataFrame([[what, fmt_sci(d), "match" if d < 1e-5 else "MISMATCH"] for what, d in diffs],
                         columns=["comparison", "max |difference|", "verdict"])
    return table


# ----- 7. Parameter accounting ------------------------------------------------------------------

def phobert_counts():
    """PhoBERT's {part: count} and a note, or (None, why it is not listed).

    Only when zoo.phobert is already imported and its process-wide explorer already holds a loaded
    model: this tab never imports transformers or loads PhoBERT itself (that may download 500 MB).
    zoo.phobert.parameter_breakdown reports per-block figures; here they become the tab's parts."""
    phobert = sys.modules.get("zoo.phobert")
    not_loaded = ("PhoBERT is not loaded in this process yet, so it is not listed; it appears here once the "
                  "PhoBERT tab has loaded it.")
    if phobert is None:
        return None, not_loaded
    try:
        if phobert.explorer().model is None:
            return None, not_loaded
        b = phobert.explorer().breakdown()
        n = b["n_blocks"]
        counts = {"embeddings": b["embeddings"], "attention": n * b["per_block_attention"],
                  "feed-forward": n * b["per_block_feed_forward"], "norms": n * b["per_block_layer_norm"],
                  "head": b["total"] - b["embeddings"] - b["blocks"]}
        if sum(counts.values()) != b["total"]:
            raise ValueError("the per-block figures do not add up to the total")
    except Exception as e:  # noqa: BLE001 - an optional extra must never break this panel
        return None, f"PhoBERT could not be listed ({type(e).__name__}: {e})."
    return counts, ("**PhoBERT**: the encoder as the seed article counts it: its embeddings include their "
                    "LayerNorm, and its head is the pooler (the masked-LM head that fill-mask uses is not counted).")


def shares_figure(breakdowns):
    """Horizontal stacked bars: each model's parameters split into parts, as shares of its total."""
    parts = [p for p in PART_COLORS if any(b.get(p) for b in breakdowns.values())]
    names = [plots.label(n) for n in breakdowns]
    bars = []
    for part in parts:
        counts = [b.get(part, 0) for b in breakdowns.values()]
        shares = [100 * c / sum(b.values()) for c, b in zip(counts, breakdowns.values(), strict=True)]
        bars.append({"type": "bar", "y": names, "x": shares, "name": part, "orientation": "h",
                     "marker": {"color": PART_COLORS[part]}, "customdata": counts,
                     "hovertemplate": part + ": %{customdata:,} (%{x:.1f}%)<extra></extra>"})
    layout = plots.layout("Where the parameters are", "share of parameters (%)", "", height=160 + 50 * len(names),
                          xaxis={"range": [0, 100]}, barmode="stack", legend={"orientation": "h", "y": -0.3})
    layout["margin"] = {"l": 120, "r": 20, "t": 60, "b": 80}
    return plots.Figure(data=bars, layout=layout)


@user_errors
def parameters():
    """/basics_params: every zoo model's parameters by part (embeddings ... head), with shares."""
    breakdowns, notes = {}, []
    for name in zoo.available():
        try:
            net = model(name)
        except Exception as e:  # noqa: BLE001 - a broken checkpoint: say so, list the others
            notes.append(f"**{name}** could not be loaded ({e}), so it is not listed.")
            continue
        counts = basics.parameter_breakdown(net)
        if sum(counts.values()) != net.num_parameters():
            raise RuntimeError(f"{name}: parts add up to {sum(counts.values()):,}, not {net.num_parameters():,}")
        breakdowns[name] = counts
        if counts["head"] == 0:
            notes.append(f"**{name}**: no separate head; the output projection is tied to the embedding matrix "
                         "(one table for input and output), so its parameters are counted once, under embeddings.")
    pho, note = phobert_counts()
    if pho:
        breakdowns["PhoBERT"] = pho
    notes.append(note)
    missing = sorted(set(zoo.MODELS) - set(zoo.available()))
    if missing:
        notes.append(f"Not trained yet, so not listed: {', '.join(missing)}.")
    parts = list(basics.PARTS) + sorted({p for b in breakdowns.values() for p in b} - set(basics.PARTS))
    rows = []
    for name, counts in breakdowns.items():
        total = sum(counts.values())
        rows.append([name] + [f"{counts.get(p, 0):,} ({100 * counts.get(p, 0) / total:.1f}%)" for p in parts]
                    + [f"{total:,}"])
    table = pd.DataFrame(rows, columns=["model"] + parts + ["total"])
    return table, shares_figure(breakdowns), "\n\n".join(notes)


# ----- layout: one builder per panel -------------------------------------------------------------
# Each builder lays its panel out, wires its events and returns its first renders, a list of
# (fn, inputs, outputs): what the panel shows before anyone touches it.

def qkv_panel():
    gr.Markdown("### 1. Q · K · V playground\nEach query is compared with every key (dot product, divided by "
                "√d_k), a softmax turns each row of scores into weights that sum to 1, and the output is "
                "the weighted average of the values. The defaults are the article's four tokens used as Q, "
                f"K and V; their weights should read {ARTICLE_WEIGHTS}.")
    with gr.Row():
        with gr.Column(scale=1):
            q_box = gr.Textbox(DEFAULT_VECTORS, lines=5, label="Q: one vector per line",
                               info=f"Numbers separated by commas or spaces; up to {basics.MAX_VECTORS} vectors "
                                    f"of up to {basics.MAX_DIM} numbers.", elem_id="basics-qkv-q")
            k_box = gr.Textbox("", lines=2, label="K (blank = same as Q)", elem_id="basics-qkv-k")
            v_box = gr.Textbox("", lines=2, label="V (blank = same as K)", elem_id="basics-qkv-v")
            run = gr.Button("Compute", variant="primary", elem_id="basics-qkv-run")
        with gr.Column(scale=2):
            heat = gr.Plot(label="Attention weights", elem_id="basics-qkv-weights")
    with gr.Row():
        table = gr.Dataframe(label="Weights and row sums", interactive=False, elem_id="basics-qkv-table")
        output = gr.Dataframe(label="Output = weights · V", interactive=False, elem_id="basics-qkv-output")
    inputs, outputs = [q_box, k_box, v_box], [heat, table, output]
    on(run.click, qkv, inputs, outputs, api_name="basics_qkv")
    return [(qkv, inputs, outputs)]


def scaling_panel():
    gr.Markdown("### 2. Why divide by √d_k\nWith q and k of unit-variance random entries, q·k is a sum of "
                "d_k products, so its spread grows like √d_k and the softmax saturates towards one-hot. "
                "Dividing by √d_k keeps the spread at 1 for every d_k. The article printed 8.00 vs 1.00 and "
                "0.687 vs 0.096 at d_k = 64 from an unstated sampling set-up; ours are measured live with "
                "2,000 queries, each against 64 fresh keys.")
    with gr.Row():
        dk = gr.Slider(1, basics.MAX_D_K, value=64, step=1, label="d_k", elem_id="basics-scale-dk")
    table = gr.Dataframe(label="At the chosen d_k", interactive=False, elem_id="basics-scale-table")
    summary = gr.Markdown(elem_id="basics-scale-summary")
    with gr.Row():
        std = gr.Plot(label="Spread", elem_id="basics-scale-std")
        peak = gr.Plot(label="Peakedness", elem_id="basics-scale-peak")
    outputs = [table, std, peak, summary]
    on(dk.release, scaling, [dk], outputs, api_name="basics_scaling")
    return [(scaling, [dk], outputs)]


def masks_panel():
    gr.Markdown("### 3. Masks\nA mask says which keys each query may look at. The causal mask hides the "
                "future; the padding mask hides `<pad>` tokens and belongs on the **key** axis (columns). "
                "Tick the box to put it on the query axis (rows) instead and see what goes wrong.")
    with gr.Row():
        n_tok = gr.Slider(2, basics.MAX_MASK_TOKENS, value=6, step=1, label="tokens", elem_id="basics-mask-tokens")
        n_pad = gr.Slider(0, basics.MAX_MASK_TOKENS - 1, value=2, step=1, label="of which padding (at the end)",
                          elem_id="basics-mask-pad")
        wrong = gr.Checkbox(False, label="Apply the padding mask on the wrong (query) axis",
                            elem_id="basics-mask-wrong")
    with gr.Row():
        causal = gr.Plot(label="Causal mask", elem_id="basics-mask-causal")
        padding = gr.Plot(label="Padding mask", elem_id="basics-mask-padding")
    with gr.Row():
        enc = gr.Plot(label="Weights, padding mask", elem_id="basics-mask-weights")
        dec = gr.Plot(label="Weights, causal + padding", elem_id="basics-mask-causal-weights")
    summary = gr.Markdown(elem_id="basics-mask-summary")
    inputs, outputs = [n_tok, n_pad, wrong], [causal, padding, enc, dec, summary]
    on([n_tok.release, n_pad.release, wrong.change], masks, inputs, outputs, api_name="basics_masks")
    return [(masks, inputs, outputs)]


def positions_panel():
    gr.Markdown("### 4. Positional encoding\nAttention itself ignores order, so each position adds a "
                "fixed pattern of sines and cosines at geometrically spaced frequencies. Hover for values; "
                "at d_model = 32, position 1 starts 0.841, 0.540, 0.533, 0.846, 0.311, 0.950.")
    with gr.Row():
        n_pos = gr.Slider(1, basics.MAX_POSITIONS, value=64, step=1, label="positions", elem_id="basics-pe-positions")
        d_model = gr.Slider(2, basics.MAX_D_MODEL, value=32, step=2, label="d_model (even)",
                            elem_id="basics-pe-dmodel")
        probe = gr.Number(1, precision=0, label="read position", elem_id="basics-pe-probe")
    heat = gr.Plot(label="PE matrix", elem_id="basics-pe-heatmap")
    probe_table = gr.Dataframe(label="First dimensions of the read position", interactive=False,
                               elem_id="basics-pe-probe-table")
    inputs, outputs = [n_pos, d_model, probe], [heat, probe_table]
    on([n_pos.release, d_model.release, probe.submit], positions, inputs, outputs, api_name="basics_positions")

    gr.Markdown("**Permutation check**: shuffle the tokens, run attention, put the outputs back in order. "
                "Uses the d_model above.")
    with gr.Row():
        seed = gr.Number(0, precision=0, label="seed", elem_id="basics-perm-seed")
        run = gr.Button("Shuffle and compare", elem_id="basics-perm-run")
    perm_table = gr.Dataframe(interactive=False, elem_id="basics-perm-table")
    perm_text = gr.Markdown(elem_id="basics-perm-summary")
    perm_inputs, perm_outputs = [d_model, seed], [perm_table, perm_text]
    on([run.click, d_model.release], permutation, perm_inputs, perm_outputs, api_name="basics_permutation")
    return [(positions, inputs, outputs), (permutation, perm_inputs, perm_outputs)]


def shift_panel():
    gr.Markdown("**Relative positions**: the lesson says a model can learn relative position because PE[pos + k] "
                "is a linear function of PE[pos]. Here is that function, built from the formula and applied to "
                "every position.")
    with gr.Row():
        k = gr.Slider(1, 64, value=5, step=1, label="k (steps on)", elem_id="basics-shift-k")
        d_model = gr.Slider(2, basics.MAX_D_MODEL, value=32, step=2, label="d_model (even)",
                            elem_id="basics-shift-dmodel")
        n_pos = gr.Slider(1, basics.MAX_POSITIONS, value=64, step=1, label="positions",
                          elem_id="basics-shift-positions")
    with gr.Row():
        fig = gr.Plot(label="M_k", elem_id="basics-shift-matrix")
        summary = gr.Markdown(elem_id="basics-shift-summary")
    inputs, outputs = [k, d_model, n_pos], [fig, summary]
    on([k.release, d_model.release, n_pos.release], shift, inputs, outputs, api_name="basics_shift")
    return [(shift, inputs, outputs)]


def cost_panel():
    lengths = basics.COST_LENGTHS
    gr.Markdown("### 5. The quadratic cost\nEvery query meets every key, so the score matrix has T² entries. "
                f"Measure one attention layer (d = 64, 4 heads) for T = {lengths[0]} … {lengths[-1]} on this "
                "machine; the run is capped at about 4 seconds and 300 MB per score matrix, and says which "
                "lengths it skipped.")
    run = gr.Button("Measure", elem_id="basics-cost-run")
    with gr.Row():
        time_fig = gr.Plot(label="Time", elem_id="basics-cost-time")
        mem_fig = gr.Plot(label="Memory", elem_id="basics-cost-memory")
    table = gr.Dataframe(interactive=False, elem_id="basics-cost-table")
    summary = gr.Markdown("Press **Measure** to time it here.", elem_id="basics-cost-summary")
    # One at a time for the whole server: the measurement is a timing, and keeps a core busy.
    on(run.click, cost, None, [time_fig, mem_fig, table, summary], api_name="basics_cost", concurrency_limit=1)
    return []  # measured on request only


def verify_panel():
    gr.Markdown("### 6. Verification\nOur multi-head attention against `nn.MultiheadAttention` and "
                "`F.scaled_dot_product_attention`, all with the same random weights (d_model = 32, 4 heads, "
                "2 sequences of 6 tokens). The article found differences around 1e-7: float32 rounding.")
    with gr.Row():
        seed = gr.Number(0, precision=0, label="seed", elem_id="basics-verify-seed")
        masking = gr.Radio(list(basics.MASKINGS), value="none", label="mask", elem_id="basics-verify-mask")
        run = gr.Button("Compare", elem_id="basics-verify-run")
    table = gr.Dataframe(interactive=False, elem_id="basics-verify-table")
    on([run.click, masking.change], verify, [seed, masking], [table], api_name="basics_verify")
    return [(verify, [seed, masking], [table])]


def params_panel():
    sorter = basics.parameter_breakdown(model("sorter-pe"))
    gr.Markdown(f"### 7. Parameter accounting\nWhere each zoo model's parameters live. The sorter's "
                f"{sum(sorter.values()):,} split into " + ", ".join(f"{part} {n:,}" for part, n in sorter.items())
                + ".")
    run = gr.Button("Refresh", elem_id="basics-params-run")
    table = gr.Dataframe(interactive=False, elem_id="basics-params-table")
    fig = gr.Plot(label="Shares", elem_id="basics-params-shares")
    notes = gr.Markdown(elem_id="basics-params-notes")
    outputs = [table, fig, notes]
    on(run.click, parameters, None, outputs, api_name="basics_params")
    return [(parameters, [], outputs)]


PANELS = (qkv_panel, scaling_panel, masks_panel, positions_panel, shift_panel, cost_panel, verify_panel,
          params_panel)


def build(demo):
    """The "Attention basics" tab: the panels in order; its render fills every panel with the
    article's defaults."""
    with gr.Tab("Attention basics", id="basics") as tab:
        gr.Markdown("How attention works, one step at a time, computed live from your settings. The defaults "
                    "are the article's figures, so you can check them.")
        renders = [render for panel in PANELS for render in panel()]
    inputs = [c for _, ins, _ in renders for c in ins]
    outputs = [c for _, _, outs in renders for c in outs]

    def render_all(*values):
        """Every panel's callback on its own slice of the inputs, outputs in panel order."""
        out, at = [], 0
        for fn, ins, outs in renders:
            result = fn(*values[at: at + len(ins)])
            out += [result] if len(outs) == 1 else list(result)
            at += len(ins)
        return out

    return {"tab": tab, "params": [], "render": (render_all, inputs, outputs)}
