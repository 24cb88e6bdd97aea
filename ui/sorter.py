"""Sorter tab: type 8 digits, watch a 2-layer Transformer sort them, and look at every head."""

from __future__ import annotations

import re

import gradio as gr
import numpy as np
import torch
from plotly.subplots import make_subplots
import plotly.graph_objects as go

from ui import plots
from ui.common import model, quote, user_errors

SEQ_LEN = 8
MODEL_CHOICES = [("With positional encoding", "sorter-pe"), ("Without positional encoding", "sorter-nope")]
HEAD_CHOICES = ["1", "2", "3", "4", "average"]
LAYER_CHOICES = ["1", "2"]
EXAMPLES = [
    ["7 2 9 2 5 0 8 3"],  # the article's example
    ["4, 4, 1, 9, 1, 4, 0, 9"],  # duplicates
    ["5 5 5 5 5 5 5 5"],  # all equal
    ["0 1 2 3 4 5 6 7"],  # already sorted
    ["9 8 7 6 5 4 3 2"],  # reversed
]
DEFAULT = EXAMPLES[0][0]


def parse_digits(text):
    """'7 2 9 2 5 0 8 3', '7,2,9,...' or '72925083' -> list of 8 ints; else a ValueError that
    says what is accepted."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("Type 8 digits (0-9), separated by spaces or commas, e.g. 7 2 9 2 5 0 8 3.")
    if len(text) > 200:
        raise ValueError(f"That is {len(text)} characters; type just 8 digits (0-9), e.g. 7 2 9 2 5 0 8 3.")
    parts = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    if len(parts) == 1 and len(parts[0]) > 1 and parts[0].isascii() and parts[0].isdigit():
        parts = list(parts[0])  # "72925083"
    bad = [p for p in parts if not (p.isascii() and p.isdigit() and len(p) == 1)]
    if bad:
        raise ValueError(f"{quote(bad[0])} is not a digit. Use the digits 0-9 only, "
                         "separated by spaces or commas, e.g. 7 2 9 2 5 0 8 3.")
    if len(parts) != SEQ_LEN:
        raise ValueError(f"Got {len(parts)} digits; the sorter takes exactly {SEQ_LEN}, e.g. 7 2 9 2 5 0 8 3.")
    return [int(p) for p in parts]


def check_model(name):
    if name not in dict((v, k) for k, v in MODEL_CHOICES):
        raise ValueError(f"Unknown model {quote(name)}; choose sorter-pe or sorter-nope.")
    return name


def run_sorter(net, digits):
    """Predicted digits, attention maps as a (n_layer, n_head, 8, 8) array, and probabilities."""
    with torch.inference_mode():
        logits, maps = net(torch.tensor([digits]), return_attention=True)
    return (logits[0].argmax(-1).tolist(), torch.stack([m[0] for m in maps]).numpy(),
            logits[0].softmax(-1).numpy())


def select_map(maps, layer, head):
    """maps (L, H, T, T); layer '1'..; head '1'.. or 'average' -> (T, T) and a title."""
    layer_i = int(layer) - 1
    if not 0 <= layer_i < maps.shape[0]:
        raise ValueError(f"Layer must be 1 to {maps.shape[0]}.")
    if head == "average":
        return maps[layer_i].mean(0), f"layer {layer}, average of {maps.shape[1]} heads"
    head_i = int(head) - 1
    if not 0 <= head_i < maps.shape[1]:
        raise ValueError(f"Head must be 1 to {maps.shape[1]} or 'average'.")
    return maps[layer_i, head_i], f"layer {layer}, head {head}"


def marks_html(pred, target):
    """The prediction, one box per position, green when it equals the true sort, red otherwise."""
    cells = []
    for i, (p, t) in enumerate(zip(pred, target)):
        ok = p == t
        tip = f"position {i}: predicted {p}, correct {t}"
        cells.append(f'<span class="digit {"ok" if ok else "bad"}" title="{tip}">{p}'
                     f'<small>{"✓" if ok else "✗ " + str(t)}</small></span>')
    right = sum(p == t for p, t in zip(pred, target))
    return (f'<div class="sorter-marks">{"".join(cells)}</div>'
            f'<p class="sorter-score">{right}/{len(pred)} positions right'
            f'{" — sorted correctly" if right == len(pred) else ""}</p>')


def overview_figure(maps, tokens, title):
    """Every layer (rows) x every head + the head average (columns), one small map each."""
    n_layer, n_head = maps.shape[:2]
    cols = [f"head {h + 1}" for h in range(n_head)] + ["average"]
    fig = make_subplots(rows=n_layer, cols=n_head + 1, horizontal_spacing=0.02, vertical_spacing=0.08,
                        subplot_titles=[f"L{layer + 1} {c}" for layer in range(n_layer) for c in cols])
    labels = [plots.label(t) for t in tokens]
    for layer in range(n_layer):
        for c in range(n_head + 1):
            w = maps[layer].mean(0) if c == n_head else maps[layer, c]
            fig.add_trace(go.Heatmap(z=w, coloraxis="coloraxis", customdata=np.array(
                [[[q, k] for k in labels] for q in labels], dtype=object),
                hovertemplate="%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>"),
                row=layer + 1, col=c + 1)
    fig.update_layout(coloraxis=dict(colorscale=plots.COLORSCALE, cmin=0, cmax=1), height=170 * n_layer + 80,
                      title=dict(text=title, x=0.5), font=plots.FONT, margin=dict(l=20, r=20, t=70, b=20))
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    return fig


@user_errors
def sort_digits(text, model_name="sorter-pe", layer="1", head="average"):
    """/sort: the sorted answer (plain text) first, then the marked prediction, the selected head's
    map and the all-heads overview."""
    digits = parse_digits(text)
    name = check_model(model_name)
    pred, maps, _ = run_sorter(model(name), digits)
    target = sorted(digits)
    w, what = select_map(maps, layer, head)
    tokens = [str(d) for d in digits]
    fig = plots.attention_heatmap(w, tokens, tokens, f"{name}: {what}",
                                  x_title="key: input position (digit)", y_title="query: input position (digit)")
    return (" ".join(map(str, pred)), marks_html(pred, target), fig,
            overview_figure(maps, tokens, f"{name}: all layers and heads"))


def build(demo):
    with gr.Tab("Sorter", id="sorter"):
        gr.Markdown(
            "A 2-layer Transformer (101,258 parameters) reads 8 digits and writes them sorted: output "
            "position *i* is the *i*-th smallest digit. Each heatmap row is a **query** position, each column "
            "a **key** position; a cell says how much that query looks at that key.")
        with gr.Row():
            with gr.Column(scale=2):
                digits = gr.Textbox(DEFAULT, label="8 digits (0-9), spaces or commas", max_length=200,
                                    elem_id="sorter-input")
                choice = gr.Radio(MODEL_CHOICES, value="sorter-pe", label="Model", elem_id="sorter-model")
                with gr.Row():
                    layer = gr.Radio(LAYER_CHOICES, value="1", label="Layer")
                    head = gr.Radio(HEAD_CHOICES, value="average", label="Head")
                btn = gr.Button("Sort", variant="primary", elem_id="sorter-run")
                gr.Examples(EXAMPLES, inputs=[digits])
            with gr.Column(scale=3):
                answer = gr.Textbox(label="Predicted sorted sequence", elem_id="sorter-answer", interactive=False)
                marks = gr.HTML(elem_id="sorter-marks")
                heat = gr.Plot(label="Attention of the selected head", elem_id="sorter-heatmap")
        overview = gr.Plot(label="All layers and heads", elem_id="sorter-overview")
        inputs, outputs = [digits, choice, layer, head], [answer, marks, heat, overview]
        btn.click(sort_digits, inputs, outputs, api_name="sort")
        digits.submit(sort_digits, inputs, outputs, api_visibility="private")
        gr.on([choice.change, layer.change, head.change], sort_digits, inputs, outputs, api_visibility="private")
        demo.load(sort_digits, inputs, outputs, api_visibility="private")
