"""PE vs no-PE tab: the same digits through both sorters, and the proof of why one fails."""

from __future__ import annotations

import gradio as gr
import numpy as np

import zoo
from ui import links, plots
from ui.common import model, on, select_head_map, user_errors, whole_number
from ui.export import export_files
from ui.sorter import (
    DEFAULT,
    EXAMPLES,
    FINAL_SNAPSHOT,
    HEAD_CHOICES,
    LAYER_CHOICES,
    MAX_CHARS,
    NAMES,
    SEQ_LEN,
    linked_digits,
    parse_digits,
    pick_net,
    run_sorter,
)
from zoo.sorter import sequence_ceiling_without_positions, sorting_ceiling_without_positions

CEILING = sorting_ceiling_without_positions(SEQ_LEN)


def summary_line(name, pred, target):
    right = sum(p == t for p, t in zip(pred, target, strict=True))
    return f"{name}: {' '.join(map(str, pred))} ({right}/{len(pred)} right)"


def both_views(digits, layer, head, snapshot):
    """For each model: its prediction, the selected map, its name, and the snapshot note."""
    views = []
    for name in NAMES:
        net, note = pick_net(name, snapshot)
        pred, maps = run_sorter(net, digits)
        w, what = select_head_map(maps, layer, head)
        views.append((name, pred, w, what, note))
    return views


@user_errors
def compare(text, layer="1", head="average", snapshot=FINAL_SNAPSHOT):
    """/compare: both answers as plain text, then the PE map, the no-PE map and their difference."""
    digits = parse_digits(text)
    target, tokens = sorted(digits), [str(d) for d in digits]
    views = both_views(digits, layer, head, snapshot)
    lines = [f"true sort: {' '.join(map(str, target))}"] + [summary_line(n, p, target) for n, p, *_ in views]
    figs = [plots.attention_heatmap(w, tokens, tokens, f"{n}: {what}") for n, _, w, what, _ in views]
    diff = plots.attention_heatmap(views[0][2] - views[1][2], tokens, tokens, "difference: PE minus no-PE",
                                   diff=True)
    return "\n".join(lines + [views[0][4]]), figs[0], figs[1], diff


@user_errors
def export_compare(text, layer="1", head="average", snapshot=FINAL_SNAPSHOT):
    """/compare_export: both selected maps and their difference, each as JSON, CSV, SVG and PNG."""
    digits = parse_digits(text)
    tokens = [str(d) for d in digits]
    views = both_views(digits, layer, head, snapshot)
    files = []
    for name, _, w, what, note in views:
        files += export_files(w, tokens, tokens, f"{name}-{what}", model=name, view=what, input=" ".join(tokens),
                              title=f"{name}: {what}", snapshot=note)
    files += export_files(views[0][2] - views[1][2], tokens, tokens, f"difference-{views[0][3]}", diff=True,
                          model="sorter-pe minus sorter-nope", view=views[0][3], input=" ".join(tokens),
                          title=f"PE minus no-PE: {views[0][3]}")
    return files


def accuracy_table():
    """Rows from each model's metrics.json, next to the ceiling for models without positions."""
    rows = []
    for name in NAMES:
        m = zoo.metrics(name)
        rows.append([name, m.get("per_position_accuracy"), m.get("sequence_accuracy"), m.get("eval_sequences")])
    rows.append([f"ceiling without positions (E[max count]/{SEQ_LEN})", round(CEILING, 4),
                 f"{sequence_ceiling_without_positions(SEQ_LEN):.5f}", "exact"])
    return rows


def loss_curves():
    series = {}
    steps = None
    for name in NAMES:
        curve = zoo.metrics(name).get("loss_curve", [])
        steps = [s for s, _ in curve]
        series[name] = [v for _, v in curve]
    return plots.line_chart(steps or [], series, "Training loss (cross-entropy per position)", "step", "loss",
                            log_y=True)


@user_errors
def permutation_test(text, seed=0):
    """/permutation_test: shuffle the input and check what moves with the digits.

    Without positions the model is permutation-equivariant: outputs and attention rows (and columns)
    are the original ones, permuted. With positions they are not: the PE model still writes the sorted
    sequence, which is what sorting requires."""
    digits = parse_digits(text)
    rng = np.random.default_rng(whole_number(seed, "The shuffle seed", 0, 2**31 - 1))
    perm = rng.permutation(len(digits))
    if (perm == np.arange(len(digits))).all():
        perm = np.roll(perm, 1)  # the identity proves nothing
    shuffled = [digits[i] for i in perm]
    rows, verdict = [], []
    for name in NAMES:
        pred, maps = run_sorter(model(name), digits)
        pred_s, maps_s = run_sorter(model(name), shuffled)
        moved = [pred[i] for i in perm]
        maps_moved = maps[:, :, perm][:, :, :, perm]
        attn_gap = float(np.abs(maps_s - maps_moved).max())
        follows = pred_s == moved
        rows.append([name, " ".join(map(str, pred)), " ".join(map(str, pred_s)), " ".join(map(str, moved)),
                     "yes" if follows else "no", f"{attn_gap:.1e}"])
        verdict.append(f"{name}: outputs {'move with the digits' if follows else 'do not move with the digits'}; "
                       f"largest attention difference from the permuted original {attn_gap:.1e}")
    text_out = (f"input {' '.join(map(str, digits))} shuffled to {' '.join(map(str, shuffled))} "
                f"(permutation {' '.join(map(str, perm.tolist()))})\n" + "\n".join(verdict))
    return text_out, rows


def build(demo):
    with gr.Tab("PE vs no-PE", id="compare") as tab:
        gr.Markdown(
            "The same architecture, trained the same way; the only difference is the sinusoidal positional "
            "encoding added to the digit embeddings. Without it, attention cannot tell positions apart: "
            "shuffling the input only shuffles the outputs, so output slot *i* cannot know it must hold the "
            "*i*-th smallest digit. The best it can do is the most frequent digit — right in "
            f"{CEILING:.0%} of slots.")
        with gr.Row():
            digits = gr.Textbox(DEFAULT, label=f"{SEQ_LEN} digits (0-9)", max_length=MAX_CHARS, elem_id="compare-input",
                                scale=3)
            layer = gr.Radio(LAYER_CHOICES, value="1", label="Layer (both models)", scale=1, elem_id="compare-layer")
            head = gr.Radio(HEAD_CHOICES, value="average", label="Head (both models)", scale=2, elem_id="compare-head")
        snapshot = gr.Slider(0, FINAL_SNAPSHOT, value=FINAL_SNAPSHOT, step=1, elem_id="compare-snapshot",
                             label="Training snapshot, both models (0 = initialisation, last = final model)")
        btn = gr.Button("Compare", variant="primary", elem_id="compare-run")
        gr.Examples(EXAMPLES, inputs=[digits])
        answer = gr.Textbox(label="Answers", lines=4, interactive=False, elem_id="compare-answer")
        with gr.Row():
            pe_map = gr.Plot(label="With positional encoding", elem_id="compare-pe")
            nope_map = gr.Plot(label="Without positional encoding", elem_id="compare-nope")
            diff_map = gr.Plot(label="Difference", elem_id="compare-diff")
        params = [links.Param("digits", digits, linked_digits), links.Param("layer", layer), links.Param("head", head),
                  links.Param("step", snapshot)]
        inputs, outputs = [p.component for p in params], [answer, pe_map, nope_map, diff_map]
        on(btn.click, compare, inputs, outputs, api_name="compare")
        on(digits.submit, compare, inputs, outputs, api_visibility="private")
        on([layer.input, head.input, snapshot.release], compare, inputs, outputs, api_visibility="private",
              trigger_mode="always_last")
        links.share_panel("compare", params, export_compare, inputs, "compare_export", "these views")

        gr.Markdown("### Permutation test\nShuffle the input and see which model's answers simply follow the digits.")
        with gr.Row():
            seed = gr.Number(0, label="Shuffle seed", precision=0, minimum=0, maximum=2**31 - 1)
            shuffle = gr.Button("Shuffle and test", elem_id="compare-shuffle")
        perm_text = gr.Textbox(label="Result", lines=3, interactive=False, elem_id="compare-perm-result")
        perm_table = gr.Dataframe(headers=["model", "output (original)", "output (shuffled input)",
                                           "original output, permuted", "outputs move with digits",
                                           "max attention gap"], interactive=False)
        on(shuffle.click, permutation_test, [digits, seed], [perm_text, perm_table], api_name="permutation_test")

        gr.Markdown(f"### Accuracy on {zoo.metrics('sorter-pe').get('eval_sequences', 0):,} fresh sequences, "
                    "and training")
        with gr.Row():
            gr.Dataframe(accuracy_table(), headers=["model", "per-position accuracy", "whole-sequence accuracy",
                                                    "sequences"], interactive=False, elem_id="compare-accuracy")
            gr.Plot(loss_curves(), label="Training loss", elem_id="compare-loss")
    return {"tab": tab, "params": params, "render": (compare, inputs, outputs)}
