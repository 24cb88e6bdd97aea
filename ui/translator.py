"""Translator tab: English in, German out, and where the decoder looked for every word."""

from __future__ import annotations

import gradio as gr
import numpy as np

from ui import plots
from ui.common import check_text, model, quote, user_errors

NAME = "translator-en-de"
MAX_CHARS = 600
# From the Multi30k *validation* split (the test split stays unseen), with their references.
EXAMPLES = [
    ["A young child is standing alone on some jagged rocks.", 5,
     "Ein kleines Kind steht allein auf einem zerklüfteten Felsen."],
    ["Two dogs play with an orange toy in tall grass.", 5,
     "Zwei Hunde spielen im hohen Gras mit einem orangen Spielzeug."],
    ["A black and white dog swimming in clear water.", 5, "Ein schwarzweißer Hund schwimmt im klaren Wasser."],
    ["A band plays a rock show to a bar audience.", 5, "Eine Band gibt ein Rockkonzert vor Zuschauern in einer Bar."],
    ["An older, overweight man flips a pancake while making breakfast.", 1,
     "Ein älterer, übergewichtiger Mann wendet einen Pfannkuchen, während er Frühstück macht."],
]
DEFAULT = EXAMPLES[0]


def check_beam(beam_size):
    """A whole number from 1 to 8 (the slider's range); anything else is refused, not rounded."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, (int, float)) or beam_size != int(beam_size) \
            or not 1 <= beam_size <= 8:
        raise ValueError(f"Beam size must be a whole number from 1 to 8, not {quote(beam_size)}.")
    return int(beam_size)


def pick(maps, layer, head):
    """maps (L, H, T_q, T_k) -> the selected (T_q, T_k) map and its name."""
    layer_i = int(layer) - 1
    if not 0 <= layer_i < maps.shape[0]:
        raise ValueError(f"Layer must be 1 to {maps.shape[0]}.")
    if head == "average":
        return maps[layer_i].mean(0), f"layer {layer}, average of heads"
    head_i = int(head) - 1
    if not 0 <= head_i < maps.shape[1]:
        raise ValueError(f"Head must be 1 to {maps.shape[1]} or 'average'.")
    return maps[layer_i, head_i], f"layer {layer}, head {head}"


def cross_figure(info, layer, head):
    w, what = pick(info["cross_attention"], layer, head)
    return plots.attention_heatmap(w, info["target_tokens"], info["source_tokens"], f"Cross-attention, {what}",
                                   x_title="source token (English)", y_title="output token (German)")


def step_view(info, step, layer, head):
    """Decoding timeline: what the decoder saw and considered when it produced output `step` (1-based)."""
    n = len(info["steps"])
    t = min(max(int(step), 1), n) - 1
    w, what = pick(info["cross_attention"], layer, head)
    s = info["steps"][t]
    fig = plots.bar_chart(info["source_tokens"], w[t], f"Step {t + 1}/{n}: producing {plots.label(s['token'])} "
                          f"— cross-attention row ({what})", "source token", "weight")
    fig.update_yaxes(range=[0, 1.05])
    table = [[i + 1, tok, round(p, 4), "✓" if tok == s["token"] else ""] for i, (tok, p) in enumerate(s["candidates"])]
    return fig, table


def reference_view(ref):
    w = ref["cross_attention"].mean(axis=(0, 1))  # (T_ref, T_src): all layers and heads
    fig = plots.attention_heatmap(w, ref["target_tokens"], ref["source_tokens"],
                                  "Reference, teacher-forced: cross-attention (mean of all layers and heads)",
                                  x_title="source token (English)", y_title="reference token (German)")
    table = [[i + 1, tok, round(float(p), 4)] for i, (tok, p) in enumerate(zip(ref["target_tokens"], ref["token_probs"]))]
    summary = (f"Reference: {len(table)} tokens, log-probability {ref['log_prob']:.2f}, "
               f"perplexity {ref['perplexity']:.2f}; least expected token: "
               f"{min(table, key=lambda r: r[2])[1]!r} (p = {min(r[2] for r in table):.3f})")
    return summary, fig, table


@user_errors
def translate(text, beam_size=5, reference="", layer="1", head="average"):
    """/translate: the German translation (plain text) first; then the cross-attention map, the
    timeline slider, its first step's view, the optional reference's scores, and the state."""
    text = check_text(text, "English sentence", MAX_CHARS)
    beam = check_beam(beam_size)
    net = model(NAME)
    info = net.explain(text, beam_size=beam)
    n = len(info["steps"])
    bar, table = step_view(info, 1, layer, head)
    ref_summary, ref_fig, ref_table = "", None, []
    if isinstance(reference, str) and reference.strip():
        ref = net.force_decode(text, check_text(reference, "German reference", MAX_CHARS))
        ref_summary, ref_fig, ref_table = reference_view(ref)
    return (info["translation"], cross_figure(info, layer, head), gr.Slider(1, n, value=1, step=1),
            bar, table, ref_summary, ref_fig, ref_table, info)


@user_errors
def reselect(info, layer, head, step):
    """Layer/head/step changed: redraw from the stored result, no new decoding."""
    if not info:
        raise ValueError("Translate a sentence first.")
    return (cross_figure(info, layer, head), *step_view(info, step, layer, head))


def build(demo):
    with gr.Tab("Translator", id="translator"):
        gr.Markdown(
            "A small encoder–decoder Transformer (3+3 layers, ~7.6M parameters) trained on Multi30k image "
            "descriptions. **Cross-attention** rows are German output tokens, columns English source tokens: "
            "each row shows where the decoder looked while writing that token. Step through the decoding "
            "with the slider; add a German reference to see how likely the model finds each of its tokens.")
        info = gr.State()
        with gr.Row():
            with gr.Column(scale=2):
                text = gr.Textbox(DEFAULT[0], label="English sentence", lines=2, max_length=MAX_CHARS,
                                  elem_id="translator-input")
                beam = gr.Slider(1, 8, value=5, step=1, label="Beam size (1 = greedy)")
                reference = gr.Textbox(DEFAULT[2], label="German reference (optional)", lines=2,
                                       max_length=MAX_CHARS, elem_id="translator-reference")
                btn = gr.Button("Translate", variant="primary", elem_id="translator-run")
                gr.Examples(EXAMPLES, inputs=[text, beam, reference])
            with gr.Column(scale=3):
                german = gr.Textbox(label="German translation", interactive=False, elem_id="translator-output")
                with gr.Row():
                    layer = gr.Radio(["1", "2", "3"], value="1", label="Layer")
                    head = gr.Radio(["1", "2", "3", "4", "average"], value="average", label="Head")
                cross = gr.Plot(label="Cross-attention", elem_id="translator-cross")
        gr.Markdown("### Decoding timeline")
        step = gr.Slider(1, 2, value=1, step=1, label="Output step", elem_id="translator-step")
        with gr.Row():
            step_bar = gr.Plot(label="Cross-attention at this step", elem_id="translator-step-plot")
            step_table = gr.Dataframe(headers=["rank", "candidate", "probability", "chosen"],
                                      label="Top-5 candidates at this step", interactive=False,
                                      elem_id="translator-candidates")
        gr.Markdown("### Reference, teacher-forced")
        ref_summary = gr.Textbox(label="Reference score", interactive=False, elem_id="translator-ref-summary")
        with gr.Row():
            ref_plot = gr.Plot(label="Reference cross-attention")
            ref_table = gr.Dataframe(headers=["position", "token", "probability"], interactive=False,
                                     label="Probability of each reference token")
        inputs = [text, beam, reference, layer, head]
        outputs = [german, cross, step, step_bar, step_table, ref_summary, ref_plot, ref_table, info]
        btn.click(translate, inputs, outputs, api_name="translate")
        text.submit(translate, inputs, outputs, api_visibility="private")
        demo.load(translate, inputs, outputs, api_visibility="private")
        gr.on([layer.change, head.change, step.change], reselect, [info, layer, head, step],
              [cross, step_bar, step_table], api_visibility="private")
