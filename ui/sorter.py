"""Sorter tab: type digits, watch a small Transformer sort them, and look at every head."""

from __future__ import annotations

import re

import gradio as gr
import numpy as np
import plotly.graph_objects as go
import torch

import zoo
from ui import links, plots
from ui.common import (
    choose,
    head_mask,
    head_names,
    model,
    on,
    quote,
    select_head_map,
    snapshots,
    user_errors,
    whole_number,
)
from ui.export import export_files
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


def overview_figure(maps, tokens, title):
    """Every layer (rows) x every head + the head average (columns), one small map each.

    Built as one figure description (axes placed by hand) rather than with make_subplots and
    repeated updates: plotly validates every update, and this figure is redrawn on every request."""
    n_layer, n_head = maps.shape[:2]
    n_col, gap = n_head + 1, 0.02
    width, height = (1 - gap * (n_col - 1)) / n_col, (1 - 0.1 * (n_layer - 1)) / n_layer
    labels = [plots.label(t) for t in tokens]
    hover = np.array([[[q, k] for k in labels] for q in labels], dtype=object)
    data, layout = [], {}
    for layer in range(n_layer):
        for c in range(n_col):
            i = layer * n_col + c + 1
            w = maps[layer].mean(0) if c == n_head else maps[layer, c]
            data.append(go.Heatmap(z=w, coloraxis="coloraxis", customdata=hover, xaxis=f"x{i}", yaxis=f"y{i}",
                                   hovertemplate="%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>"))
            x0, y1 = c * (width + gap), 1 - layer * (height + 0.1)
            layout[f"xaxis{i}"] = dict(domain=[x0, min(1.0, x0 + width)], anchor=f"y{i}", showticklabels=False)
            layout[f"yaxis{i}"] = dict(domain=[max(0.0, y1 - height), y1], anchor=f"x{i}", showticklabels=False,
                                       autorange="reversed")
            name = "average" if c == n_head else f"head {c + 1}"
            layout.setdefault("annotations", []).append(dict(
                text=f"L{layer + 1} {name}", x=x0 + width / 2, y=y1, xref="paper", yref="paper",
                xanchor="center", yanchor="bottom", showarrow=False))
    layout.update(coloraxis=dict(colorscale=plots.COLORSCALE, cmin=0, cmax=1), height=170 * n_layer + 80,
                  title=dict(text=title, x=0.5), font=plots.FONT, margin=dict(l=20, r=20, t=70, b=20))
    return go.Figure(data=data, layout=layout)


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
            overview_figure(maps, tokens, f"{name}: all layers and heads"),
            snap_note + "\n" + ablation_note(net, mask, ablate), [list(r.values()) for r in stats])


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


def select_head(evt: gr.SelectData):
    """A click on a statistics row selects that row's layer and head."""
    row = evt.row_value
    return str(row[0]), str(row[1])


def build(demo):
    """The tab; returns its input components (for deep links) and its first render (for page load)."""
    with gr.Tab("Sorter", id="sorter"):
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
                answer = gr.Textbox(label="Predicted sorted sequence", elem_id="sorter-answer", interactive=False)
                marks = gr.HTML(elem_id="sorter-marks")
                note = gr.Textbox(label="Model state", lines=2, interactive=False, elem_id="sorter-note")
                heat = gr.Plot(label="Attention of the selected head", elem_id="sorter-heatmap")
        overview = gr.Plot(label="All layers and heads", elem_id="sorter-overview")
        gr.Markdown("**Per-head statistics** for this input (click a column to sort, a row to show that head). "
                    "*answer digit* is the share of attention a query puts on the input positions holding the "
                    "digit it must output.")
        stats = gr.Dataframe(headers=STATS_HEADERS, interactive=False, elem_id="sorter-stats")
        with gr.Row():
            export_btn = gr.Button("Export this view (JSON, CSV, SVG, PNG)", elem_id="sorter-export")
            files = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id="sorter-files")
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
        on(export_btn.click, export_view, inputs, files, api_name="sort_export")
        links.add_link_button("sorter", params)
    return {"params": params, "load": (sort_digits, inputs, outputs)}
