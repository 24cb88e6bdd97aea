"""Sorter tab: type digits, watch a small Transformer sort them, and look at every head."""

from __future__ import annotations

import re

import gradio as gr
import numpy as np
import torch

import zoo
from ui import explain, links, plots
from ui.common import (
    STATS_EXPLAINED,
    choose,
    head_mask,
    head_names,
    model,
    on,
    quote,
    select_head_map,
    snapshots,
    table_rows,
    user_errors,
    whole_number,
)
from ui.export import export_files
from zoo import attribution
from zoo.sorter import accuracy, eval_set
from zoo.stats import head_table, sorter_answer_keys

NAMES = ("sorter-pe", "sorter-nope")
CONFIG = zoo.config("sorter-pe")  # both sorters share one architecture
SEQ_LEN, N_LAYER, N_HEAD = CONFIG["seq_len"], CONFIG["n_layer"], CONFIG["n_head"]
# Index of the last training snapshot saved beside both sorters' weights (the last is the final model).
FINAL_SNAPSHOT = max(0, min(len(zoo.metrics(n).get("snapshots", [])) for n in NAMES) - 1)
FIXED = eval_set(1000, seed=1)  # the ablation's fixed benchmark: 1,000 sequences, always the same
STATS_HEADERS = ["layer", "head", "entropy (nats)", "self", "previous", "next", "first token", "answer digit"]
MODEL_CHOICES = [("With positional encoding", "sorter-pe"), ("Without positional encoding", "sorter-nope")]
HEAD_CHOICES = [str(h + 1) for h in range(N_HEAD)] + ["average"]
LAYER_CHOICES = [str(layer + 1) for layer in range(N_LAYER)]
EXAMPLES = [
    ["7 2 9 2 5 0 8 3"],  # the article's example
    ["4, 4, 1, 9, 1, 4, 0, 9"],  # duplicates
    ["5 5 5 5 5 5 5 5"],  # all equal
    ["0 1 2 3 4 5 6 7"],  # already sorted
    ["9 8 7 6 5 4 3 2"],  # reversed
]
DEFAULT = EXAMPLES[0][0]
MAX_CHARS = 200


def parse_digits(text):
    """'7 2 9 2 5 0 8 3', '7,2,9,...' or '72925083' -> list of SEQ_LEN ints; else a ValueError that
    says what is accepted."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Type {SEQ_LEN} digits (0-9), separated by spaces or commas, e.g. {DEFAULT}.")
    if len(text) > MAX_CHARS:
        raise ValueError(f"That is {len(text)} characters; type just {SEQ_LEN} digits (0-9), e.g. {DEFAULT}.")
    parts = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    if len(parts) == 1 and len(parts[0]) > 1 and parts[0].isascii() and parts[0].isdigit():
        parts = list(parts[0])  # "72925083"
    bad = [p for p in parts if not (p.isascii() and p.isdigit() and len(p) == 1)]
    if bad:
        raise ValueError(f"{quote(bad[0])} is not a digit. Use the digits 0-9 only, "
                         f"separated by spaces or commas, e.g. {DEFAULT}.")
    if len(parts) != SEQ_LEN:
        raise ValueError(f"Got {len(parts)} digits; the sorter takes exactly {SEQ_LEN}, e.g. {DEFAULT}.")
    return [int(p) for p in parts]


def linked_digits(text):
    """A link's digits: kept as written when they parse (ui.links checks every link value)."""
    parse_digits(text)
    return text


def check_model(name):
    return choose(name, [v for _, v in MODEL_CHOICES], "Model")


def run_sorter(net, digits, mask=None):
    """Predicted digits and the attention maps as a (n_layer, n_head, 8, 8) array."""
    with torch.inference_mode():
        logits, maps = net(torch.tensor([digits]), return_attention=True, head_mask=mask)
    return logits[0].argmax(-1).tolist(), torch.stack([m[0] for m in maps]).numpy()


def marks_html(pred, target):
    """The prediction, one box per position, green when it equals the true sort, red otherwise."""
    cells = []
    for i, (p, t) in enumerate(zip(pred, target, strict=True)):
        ok = p == t
        tip = f"position {i}: predicted {p}, correct {t}"
        cells.append(f'<span class="digit {"ok" if ok else "bad"}" title="{tip}">{p}'
                     f'<small>{"✓" if ok else "✗ " + str(t)}</small></span>')
    right = sum(p == t for p, t in zip(pred, target, strict=True))
    return (f'<div class="sorter-marks">{"".join(cells)}</div>'
            f'<p class="sorter-score">{right}/{len(pred)} positions right'
            f'{" — sorted correctly" if right == len(pred) else ""}</p>')


def overview_figure(maps, title):
    """Every layer (rows) x every head and the heads' average (columns) as one mosaic: a single
    heatmap of T x T tiles with a blank row and column between them, each tile titled, so the
    browser draws one trace instead of a dozen subplots. Hover names the tile, row and column."""
    n_layer, n_head, t = maps.shape[0], maps.shape[1], maps.shape[-1]
    tiles = [[maps[layer, h] for h in range(n_head)] + [maps[layer].mean(0)] for layer in range(n_layer)]
    names = [f"H{h + 1}" for h in range(n_head)] + ["avg"]
    step = t + 1  # a tile and the gap after it
    z = np.full((n_layer * step - 1, len(names) * step - 1), np.nan)
    where = np.full(z.shape, "", dtype=object)
    for layer, row in enumerate(tiles):
        for c, w in enumerate(row):
            z[layer * step: layer * step + t, c * step: c * step + t] = w
            where[layer * step: layer * step + t, c * step: c * step + t] = f"L{layer + 1} {names[c]}"
    q, k = np.indices(z.shape)
    hover = np.stack([where, q % step, k % step], axis=-1)  # (rows, cols, 3): tile, query, key
    heat = {"type": "heatmap", "z": np.round(z, 3).tolist(), "customdata": hover.tolist(), "zmin": 0, "zmax": 1,
            "colorscale": plots.COLORSCALE, "xgap": 0, "ygap": 0, "colorbar": {"thickness": 12},
            "hovertemplate": "%{customdata[0]}: row %{customdata[1]} → column %{customdata[2]}: %{z:.3f}"
                             "<extra></extra>"}
    titles = [{"text": f"L{layer + 1} {name}", "x": c * step + (t - 1) / 2, "y": layer * step - 0.6,
               "xref": "x", "yref": "y", "showarrow": False, "yanchor": "bottom"}
              for layer in range(n_layer) for c, name in enumerate(names)]
    hidden = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": ""}
    return plots.Figure(data=[heat], layout={
        "title": {"text": plots.label(title), "x": 0.5}, "font": plots.FONT, "height": 170 * n_layer + 90,
        "plot_bgcolor": "white", "paper_bgcolor": "white", "margin": {"l": 20, "r": 20, "t": 80, "b": 20},
        "annotations": titles, "xaxis": hidden, "yaxis": {**hidden, "autorange": "reversed"}})


def pick_net(name, snapshot):
    """The model at training snapshot `snapshot` (an index into the saved snapshots; the last one
    is the final model) and a line describing it."""
    snaps = snapshots(name)
    snapshot = whole_number(snapshot, "Training snapshot", 0, len(snaps) - 1)
    snap = snaps[snapshot]
    final = snapshot == len(snaps) - 1
    net = model(name) if final else snap["model"]
    where = "final model" if final else "snapshot"
    fresh = zoo.metrics(name).get("eval_sequences", 0)
    return net, (f"{where}: training step {snap['step']} of {snaps[-1]['step']} — accuracy on {fresh:,} fresh "
                 f"sequences "
                 f"{snap['per_position_accuracy']:.3f} per position, {snap['sequence_accuracy']:.3f} whole sequence")


def ablation_note(net, mask, off):
    """Whole-sequence accuracy on 1,000 fixed sequences with and without the switched-off heads."""
    if mask is None:
        return "No heads switched off."
    x, y = FIXED
    base, ablated = accuracy(net, x, y), accuracy(net, x, y, head_mask=mask)
    return (f"Switched off {', '.join(off)}. On {len(x):,} fixed sequences: whole-sequence accuracy "
            f"{ablated[1]:.3f} (intact model {base[1]:.3f}), per position {ablated[0]:.3f} (intact {base[0]:.3f}).")


@user_errors
def sort_digits(text, model_name="sorter-pe", layer="1", head="average", snapshot=FINAL_SNAPSHOT, ablate=None):
    """/sort: the sorted answer (plain text) first; then the marked prediction, the selected head's
    map, the all-heads overview, a note on the snapshot and ablation, and the per-head statistics."""
    digits = parse_digits(text)
    name = check_model(model_name)
    net, snap_note = pick_net(name, snapshot)
    mask = head_mask(ablate, N_LAYER, N_HEAD)
    pred, maps = run_sorter(net, digits, mask)
    target = sorted(digits)
    w, what = select_head_map(maps, layer, head)
    tokens = [str(d) for d in digits]
    fig = plots.attention_heatmap(w, tokens, tokens, f"{name}: {what}",
                                  x_title="key: input position (digit)", y_title="query: input position (digit)")
    stats = head_table(maps, sorter_answer_keys(digits))
    return (" ".join(map(str, pred)), marks_html(pred, target), fig,
            overview_figure(maps, f"{name}: all layers and heads"),
            snap_note + "\n" + ablation_note(net, mask, ablate), table_rows(stats))


@user_errors
def export_view(text, model_name="sorter-pe", layer="1", head="average", snapshot=FINAL_SNAPSHOT, ablate=None):
    """/sort_export: the selected view as JSON, CSV, SVG and PNG files."""
    digits = parse_digits(text)
    name = check_model(model_name)
    net, snap_note = pick_net(name, snapshot)
    _, maps = run_sorter(net, digits, head_mask(ablate, N_LAYER, N_HEAD))
    w, what = select_head_map(maps, layer, head)
    tokens = [str(d) for d in digits]
    return export_files(w, tokens, tokens, f"{name}-{what}", model=name, view=what, input=" ".join(tokens),
                        title=f"{name}: {what}", snapshot=snap_note, heads_switched_off=list(ablate or []))


@user_errors
def attribute(text, output_position=0, model_name="sorter-pe", layer="1", head="1"):
    """/sort_attribution: is attention an explanation of the digit predicted at output_position
    (from 0)? Attention, rollout, gradient x input, integrated gradients and leave-one-out over the
    input digits, each scored against leave-one-out."""
    digits = parse_digits(text)
    position = whole_number(output_position, "The output position", 0, SEQ_LEN - 1)
    name = check_model(model_name)
    layer = int(choose(layer, LAYER_CHOICES, "Layer")) - 1
    head = 0 if head == "average" else int(choose(head, HEAD_CHOICES, "Head")) - 1
    target, maps, predicted = attribution.sorter_target(model(name), digits, position)
    report = attribution.explain(target, attribution.attention_rows(maps, position, layer, head))
    what = (f"{name}, output position {position}: predicted {predicted} (log-probability "
            f"{report['target']:.3f}); baseline: a zero embedding")
    return explain.views(report, [str(d) for d in digits], what, f"What drives output {position} = {predicted}")


def select_head(evt: gr.SelectData):
    """A click on a statistics row selects that row's layer and head."""
    row = evt.row_value
    return str(row[0]), str(row[1])


def build(demo):
    """The first tab, shown at page load with the default input's result already in place: it is
    computed here, once per process, and every visitor's page carries it (no event at page load)."""
    first = sort_digits(DEFAULT, "sorter-pe", "1", "average", FINAL_SNAPSHOT, [])
    with gr.Tab("Sorter", id="sorter") as tab:
        gr.Markdown(
            f"A {N_LAYER}-layer Transformer ({model('sorter-pe').num_parameters():,} parameters) reads {SEQ_LEN} "
            "digits and writes them sorted: output position *i* is the *i*-th smallest digit. Each heatmap row is a "
            "**query** position, each column a **key** position; a cell says how much that query looks at that key.")
        with gr.Row():
            with gr.Column(scale=2):
                digits = gr.Textbox(DEFAULT, label=f"{SEQ_LEN} digits (0-9), spaces or commas", max_length=MAX_CHARS,
                                    elem_id="sorter-input")
                choice = gr.Radio(MODEL_CHOICES, value="sorter-pe", label="Model", elem_id="sorter-model")
                with gr.Row():
                    layer = gr.Radio(LAYER_CHOICES, value="1", label="Layer", elem_id="sorter-layer")
                    head = gr.Radio(HEAD_CHOICES, value="average", label="Head", elem_id="sorter-head")
                snapshot = gr.Slider(0, FINAL_SNAPSHOT, value=FINAL_SNAPSHOT, step=1, elem_id="sorter-snapshot",
                                     label="Training snapshot (0 = initialisation, last = final model)")
                ablate = gr.CheckboxGroup(head_names(N_LAYER, N_HEAD), label="Switch heads off (ablation)",
                                          elem_id="sorter-ablate")
                btn = gr.Button("Sort", variant="primary", elem_id="sorter-run")
                gr.Examples(EXAMPLES, inputs=[digits])
            with gr.Column(scale=3):
                answer = gr.Textbox(first[0], label="Predicted sorted sequence", elem_id="sorter-answer",
                                    interactive=False)
                marks = gr.HTML(first[1], elem_id="sorter-marks")
                note = gr.Textbox(first[4], label="Model state", lines=2, interactive=False, elem_id="sorter-note")
                heat = gr.Plot(first[2], label="Attention of the selected head", elem_id="sorter-heatmap")
        overview = gr.Plot(first[3], label="All layers and heads", elem_id="sorter-overview")
        with gr.Accordion("Per-head statistics for this input", open=False, elem_id="sorter-stats-box"):
            gr.Markdown("Click a column to sort, a row to show that head. " + STATS_EXPLAINED + " *answer digit*: the "
                        "share a query puts on the input positions holding the digit it must output.")
            stats = gr.Dataframe(first[5], headers=STATS_HEADERS, interactive=False, elem_id="sorter-stats")
        params = [links.Param("digits", digits, linked_digits), links.Param("model", choice),
                  links.Param("layer", layer), links.Param("head", head), links.Param("step", snapshot),
                  links.Param("off", ablate)]
        inputs = [p.component for p in params]
        outputs = [answer, marks, heat, overview, note, stats]
        on(btn.click, sort_digits, inputs, outputs, api_name="sort")
        on(digits.submit, sort_digits, inputs, outputs, api_visibility="private")
        # .input, not .change: only a user's own change reruns (a shared link sets values by code);
        # always_last: a change made while a run is in flight is run afterwards, not dropped
        rerun = dict(fn=sort_digits, inputs=inputs, outputs=outputs, api_visibility="private",
                     trigger_mode="always_last")
        on([choice.input, layer.input, head.input, snapshot.release, ablate.input], **rerun)
        on(stats.select, select_head, None, [layer, head], api_visibility="private").then(**rerun, preprocess=False)
        with gr.Accordion("Is attention an explanation? Test it on this input", open=False,
                          elem_id="sorter-explain"):
            with gr.Row():
                position = gr.Slider(0, SEQ_LEN - 1, value=0, step=1, label="output position (from 0)",
                                     elem_id="sorter-explain-position")
                go = gr.Button("Test attention against the other methods", elem_id="sorter-explain-run")
            views = explain.panel("Sorter", "sorter")
            on(go.click, attribute, [digits, position, choice, layer, head], views, api_name="sort_attribution")
        links.share_panel("sorter", params, export_view, inputs, "sort_export")
    return {"tab": tab, "params": params, "render": (sort_digits, inputs, outputs), "embedded": True}
