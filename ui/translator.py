"""Translator tab: English in, German out, and where the decoder looked for every word."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import numpy as np

import zoo
from ui import explain, links, plots, translator_views
from ui.common import (
    STATE_SECONDS,
    STATS_EXPLAINED,
    check_text,
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
from ui.translator_views import attention_choice, forced_output
from zoo import attribution
from zoo.stats import head_table

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
INSTALLED = NAME in zoo.available()
CONFIG = zoo.config(NAME) if INSTALLED else {}  # the tab explains itself until the translator is trained
N_ENC, N_DEC, N_HEAD = CONFIG.get("n_enc_layer", 3), CONFIG.get("n_dec_layer", 3), CONFIG.get("n_head", 4)
ABLATION_CHOICES = (head_names(N_ENC, N_HEAD, "enc ") + head_names(N_DEC, N_HEAD, "dec ")
                    + head_names(N_DEC, N_HEAD, "cross "))
METRICS = zoo.metrics(NAME) if INSTALLED else {}
# Slider positions: the int8 snapshots saved along training (oldest first), then the final model.
SNAPSHOT_EPOCHS = [s["epoch"] for s in METRICS.get("snapshots", [])]
FINAL_SNAPSHOT = len(SNAPSHOT_EPOCHS)


COMPONENTS = {"cross-attention": ("cross_attention", "target_tokens", "source_tokens",
                                   "output token (German)", "source token (English)"),
              "decoder self-attention": ("decoder_self_attention", "target_tokens", "decoder_input_tokens",
                                         "output token being produced (query)", "decoder input so far (key)"),
              "encoder self-attention": ("encoder_self_attention", "source_tokens", "source_tokens",
                                         "source token (query)", "source token (key)")}
MASK_KEYS = {"cross": "cross", "dec": "decoder_self", "enc": "encoder"}  # ablation name prefix -> head_mask key
STATS_HEADERS = ["component", "layer", "head", "entropy (nats)", "self", "previous", "next", "first token"]


def translator_head_mask(net, selected):
    """['cross L1H2', 'enc L3H1', ...] -> the translator's head_mask dict, or None."""
    if not selected:
        return None
    if isinstance(selected, str) or not isinstance(selected, (list, tuple)):
        raise ValueError("Heads to switch off must be a list of names like 'cross L1H2'.")
    unknown = [s for s in selected if not (isinstance(s, str) and s.split(" ", 1)[0] in MASK_KEYS)]
    if unknown:
        raise ValueError(f"Unknown head {quote(unknown[0])}; choose from {', '.join(ABLATION_CHOICES)}.")
    n_head = net.decoder[0].self_attn.n_head
    masks = {}
    for prefix, key in MASK_KEYS.items():
        chosen = [s for s in selected if s.startswith(prefix + " ")]
        n_layer = len(net.encoder) if key == "encoder" else len(net.decoder)
        masks[key] = head_mask(chosen, n_layer, n_head, prefix + " ")
    return masks


def component_view(info, component, layer, head):
    """(weights, query tokens, key tokens, title, axis titles) of the selected map."""
    key, q_key, k_key, y_title, x_title = COMPONENTS[choose(component, list(COMPONENTS), "Attention")]
    w, what = select_head_map(info[key], layer, head)
    return w, info[q_key], info[k_key], f"{component[0].upper() + component[1:]}, {what}", x_title, y_title


def main_figure(info, component, layer, head):
    w, q, k, title, x_title, y_title = component_view(info, component, layer, head)
    return plots.attention_heatmap(w, q, k, title, x_title=x_title, y_title=y_title)


def step_view(info, step, layer, head):
    """Decoding timeline: what the decoder saw and considered when it produced output `step` (1-based)."""
    n = len(info["steps"])
    t = min(max(int(step), 1), n) - 1
    w, what = select_head_map(info["cross_attention"], layer, head)
    s = info["steps"][t]
    fig = plots.bar_chart(info["source_tokens"], w[t], f"Step {t + 1}/{n}: producing {s['token']} "
                          f"— cross-attention row ({what})", "source token", "weight", y_range=[0, 1.05])
    table = [[i + 1, tok, round(p, 4), "✓" if tok == s["token"] else ""] for i, (tok, p) in enumerate(s["candidates"])]
    return fig, table


# Statistics that mean nothing for a component are left blank: cross-attention rows and columns are
# different sequences (no "self"), and causal self-attention can never look at the next token.
BLANK = {"cross-attention": {"self", "previous", "next"}, "decoder self-attention": {"next"}}


def stats_rows(info):
    rows = []
    for component, (key, *_rest) in COMPONENTS.items():
        blank = BLANK.get(component, set())
        rows += [[component] + [None if k in blank else v for k, v in r.items()] for r in head_table(info[key])]
    return rows


def reference_view(ref):
    w = ref["cross_attention"].mean(axis=(0, 1))  # (T_ref, T_src): all layers and heads
    fig = plots.attention_heatmap(w, ref["target_tokens"], ref["source_tokens"],
                                  "Reference, teacher-forced: cross-attention (mean of all layers and heads)",
                                  x_title="source token (English)", y_title="reference token (German)")
    table = [[i + 1, tok, round(float(p), 4)]
             for i, (tok, p) in enumerate(zip(ref["target_tokens"], ref["token_probs"], strict=True))]
    worst = min(table, key=lambda r: r[2])
    summary = (f"Reference: {len(table)} tokens, log-probability {ref['log_prob']:.2f}, "
               f"perplexity {ref['perplexity']:.2f}; least expected token: {worst[1]!r} (p = {worst[2]:.3f})")
    return summary, fig, table


def pick_net(snapshot=None):
    """The translator at slider position `snapshot` (0.. for the saved snapshots, oldest first; one
    past them, or None, for the final model) and a line saying which weights these are and how
    well they translate."""
    training = METRICS.get("training", {})
    epochs, steps = training.get("epochs"), training.get("steps")
    index = FINAL_SNAPSHOT if snapshot is None else whole_number(snapshot, "Training snapshot", 0, FINAL_SNAPSHOT)
    if index == FINAL_SNAPSHOT:
        evaluation = METRICS.get("evaluation", {})
        test = evaluation.get("splits", {}).get("test_2016_flickr")
        score = (f"; test_2016_flickr BLEU {test['bleu']:.1f} with beam {evaluation['beam_size']}, length penalty "
                 f"{evaluation['length_penalty']}") if test else ""
        return model(NAME), f"Final model: {training.get('kept', 'trained weights')}, of {epochs} epochs{score}."
    snap = snapshots(NAME)[index]
    return snap["model"], (f"Snapshot after epoch {snap['epoch']} of {epochs} (step {snap['step']} of {steps}), "
                           f"stored in int8: greedy val BLEU {snap['val_bleu_greedy_int8']:.1f}, val loss "
                           f"{snap['val_loss']:.2f}.")


def familiarity_note(info, calibrated):
    """Beside the translation: is the sentence like the training data? The model's mean token
    log-probability of its own output, placed among val's (training.ood's percentiles)."""
    score = float(np.mean(np.log(np.maximum([s["prob"] for s in info["steps"]], 1e-30))))
    ood = METRICS.get("ood")
    if not ood:
        return f"Mean token log-probability {score:.2f} (no out-of-domain calibration: python -m training.ood)."
    percentile = min(100, int(np.searchsorted(ood["val_percentiles"], score)))
    caveat = "" if calibrated else " (calibrated for the final model, beam 5, every head on; this is another setting)"
    if score < ood["threshold"]:
        return (f"⚠ Unlike the training data. This model knows Flickr image captions (people, animals and places "
                f"in photos); its translation's mean token log-probability is {score:.2f}, lower than "
                f"{100 - percentile}% of val sentences'. Expect mistakes.{caveat}")
    return (f"Like the training data (Flickr image captions): mean token log-probability {score:.2f}, percentile "
            f"{percentile} of val; the warning starts below percentile {ood['warn_below_percentile']:g}.{caveat}")


@user_errors
def translate(text, beam_size=5, reference="", component="cross-attention", layer="1", head="average",
              ablate=None, snapshot=None):
    """/translate: the German translation (plain text) first; then the selected attention map, the
    timeline slider, its first step's view, the per-head statistics, the optional reference's
    scores, the state that later selections redraw from, which weights were used, and whether the
    sentence is like the training data."""
    text = check_text(text, "English sentence", MAX_CHARS)
    beam = whole_number(beam_size, "Beam size", 1, 8)
    net, snap_note = pick_net(snapshot)
    final = snapshot is None or whole_number(snapshot, "Training snapshot", 0, FINAL_SNAPSHOT) == FINAL_SNAPSHOT
    mask = translator_head_mask(net, ablate)
    info = net.explain(text, beam_size=beam, head_mask=mask)
    info["ablated"], info["snapshot"] = list(ablate or []), snap_note
    bar, table = step_view(info, 1, layer, head)
    ref_summary, ref_fig, ref_table = "", None, []
    if isinstance(reference, str) and reference.strip():
        ref = net.force_decode(text, check_text(reference, "German reference", MAX_CHARS), head_mask=mask)
        ref_summary, ref_fig, ref_table = reference_view(ref)
        info["reference"] = ref
    n = len(info["steps"])
    return (info["translation"], main_figure(info, component, layer, head), gr.Slider(1, n, value=1, step=1),
            bar, table, stats_rows(info), ref_summary, ref_fig, ref_table, info, snap_note,
            familiarity_note(info, beam == 5 and not mask and final))


@user_errors
def reselect(info, component, layer, head, step):
    """Component/layer/head/step changed: redraw from the stored result, no new decoding."""
    if not info:
        raise ValueError("Translate a sentence first.")
    return (main_figure(info, component, layer, head), *step_view(info, step, layer, head))


@user_errors
def export_view(info, component, layer, head):
    """The selected map (and the reference's, when there is one) as JSON, CSV, SVG and PNG."""
    if not info:
        raise ValueError("Translate a sentence first.")
    w, q, k, title, *_ = component_view(info, component, layer, head)
    meta = {"model": NAME, "input": info["source_tokens"], "translation": info["translation"],
            "heads_switched_off": info.get("ablated", []), "snapshot": info.get("snapshot", "")}
    files = export_files(w, q, k, f"translator-{title}", title=title, view=title, **meta)
    if "reference" in info:
        ref = info["reference"]
        files += export_files(ref["cross_attention"].mean(axis=(0, 1)), ref["target_tokens"], ref["source_tokens"],
                              "translator-reference-cross-attention", view="reference cross-attention, mean of all "
                              "layers and heads", title="Reference cross-attention (mean)", **meta)
    return files


def linked_text(text):
    """A link's sentence: within the caps the tab applies to typed text."""
    return check_text(text, "English sentence", MAX_CHARS)


def linked_reference(text):
    return check_text(text, "German reference", MAX_CHARS) if text.strip() else ""


def linked_snapshot(value):
    return whole_number(value, "Training snapshot", 0, FINAL_SNAPSHOT)


def explained_step(net, src_ids, out_ids, step, layer, head):
    """zoo.attribution's report for output token `step`. Attention: the chosen decoder layer and
    head's cross-attention row of that token. Rollout: the encoder's rollout (its self-attention
    composed over layers, with the residual) read through the last decoder layer's cross-attention,
    mean of heads; the decoder's own self-attention over earlier output tokens is left out."""
    rows = translator_views.cross_rows(net, src_ids, out_ids, step, layer, head)
    return attribution.explain(attribution.translator_target(net, src_ids, out_ids, step), rows)


@user_errors
def attribute(text, output_step=0, reference="", layer="1", head="1"):
    """/translate_attribution: is attention an explanation of output token output_step (from 0, over
    the translation's tokens, or the reference's when one is given)? The five methods over the
    source tokens, each scored against leave-one-out."""
    net = model(NAME)
    src_ids, out_ids, whose = forced_output(net, text, reference)
    step = whole_number(output_step, "The output step", 0, len(out_ids) - 1)
    report = explained_step(net, src_ids, out_ids, step, *attention_choice(net, layer, head))
    token = net.token_strings([out_ids[step]])[0]
    what = (f"output step {step} of {whose}: {token!r} (log-probability {report['target']:.3f}, teacher-forced); "
            "baseline: the padding embedding")
    return explain.views(report, net.token_strings(src_ids), what, f"What drives {token!r}")


@user_errors
def attribute_all(text, reference="", layer="1", head="1", progress=gr.Progress()):
    """Every output token in turn: each method's Spearman with leave-one-out, one row per token."""
    net = model(NAME)
    src_ids, out_ids, _ = forced_output(net, text, reference)
    choice, rows = attention_choice(net, layer, head), []
    for step in progress.tqdm(range(len(out_ids)), desc="output tokens"):
        faith = explained_step(net, src_ids, out_ids, step, *choice)["faithfulness"]
        rows.append([step, net.token_strings([out_ids[step]])[0]]
                    + [None if f["spearman"] is None else round(f["spearman"], 3)
                       for m, f in faith.items() if m not in ("random", "leave-one-out")])
    return rows


def select_row(evt: gr.SelectData):
    """A click on a statistics row shows that component, layer and head."""
    component, layer, head = evt.row_value[:3]
    return component, str(layer), str(head)


def input_column():
    """The sentence, the search and the model: what a translation is made from."""
    text = gr.Textbox(DEFAULT[0], label="English sentence", lines=2, max_length=MAX_CHARS, elem_id="translator-input")
    beam = gr.Slider(1, 8, value=5, step=1, label="Beam size (1 = greedy)", elem_id="translator-beam")
    reference = gr.Textbox(DEFAULT[2], label="German reference (optional)", lines=2, max_length=MAX_CHARS,
                           elem_id="translator-reference")
    ablate = gr.Dropdown(ABLATION_CHOICES, multiselect=True, label="Switch heads off (ablation)",
                         elem_id="translator-ablate")
    # (a slider needs two positions: without snapshots it stays hidden at 0, the final model)
    snapshot_label = "Training snapshot: " + ", ".join([f"{i} = after epoch {e}" for i, e in enumerate(SNAPSHOT_EPOCHS)]
                                                      + [f"{FINAL_SNAPSHOT} = final model"])
    snapshot = gr.Slider(0, max(1, FINAL_SNAPSHOT), value=FINAL_SNAPSHOT, step=1, elem_id="translator-snapshot",
                         visible=bool(SNAPSHOT_EPOCHS), label=snapshot_label)
    run = gr.Button("Translate", variant="primary", elem_id="translator-run")
    gr.Examples(EXAMPLES, inputs=[text, beam, reference])
    return SimpleNamespace(text=text, beam=beam, reference=reference, ablate=ablate, snapshot=snapshot, run=run)


def view_column():
    """The translation and the attention map of the chosen kind, layer and head."""
    german = gr.Textbox(label="German translation", interactive=False, elem_id="translator-output")
    familiar = gr.Textbox(label="Is the sentence like the training data?", interactive=False, lines=2,
                          elem_id="translator-familiarity")
    note = gr.Textbox(label="Model state", interactive=False, elem_id="translator-note")
    component = gr.Radio(list(COMPONENTS), value="cross-attention", label="Attention", elem_id="translator-component")
    with gr.Row():
        layer = gr.Radio([str(i + 1) for i in range(max(N_ENC, N_DEC))], value="1", label="Layer",
                         elem_id="translator-layer")
        head = gr.Radio([str(i + 1) for i in range(N_HEAD)] + ["average"], value="average", label="Head",
                        elem_id="translator-head")
    cross = gr.Plot(label="Attention map", elem_id="translator-cross")
    return SimpleNamespace(german=german, familiar=familiar, note=note, component=component, layer=layer,
                           head=head, cross=cross)


def details():
    """The decoding timeline, the reference's scores, per-head statistics and the export."""
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
    with gr.Accordion("Per-head statistics for this sentence", open=False, elem_id="translator-stats-box"):
        gr.Markdown("Click a row to show that head. " + STATS_EXPLAINED
                    + " Blank: a statistic that means nothing for that kind of attention.")
        stats = gr.Dataframe(headers=STATS_HEADERS, interactive=False, elem_id="translator-stats")
    return SimpleNamespace(step=step, step_bar=step_bar, step_table=step_table, ref_summary=ref_summary,
                           ref_plot=ref_plot, ref_table=ref_table, stats=stats)


def explanation(i, v):
    """The closed box that tests attention against the other methods, for one token or all of them."""
    with gr.Accordion("Is attention an explanation? Test it on this sentence", open=False,
                      elem_id="translator-explain"):
        gr.Markdown("The model's own translation (or the reference above, when there is one) is read again by "
                    "teacher forcing; the chosen output token's log-probability is explained over the source "
                    "tokens. Attention: the layer and head chosen above, of the decoder's cross-attention.")
        with gr.Row():
            step = gr.Slider(0, 40, value=0, step=1, label="output token (from 0)", elem_id="translator-explain-step")
            go = gr.Button("Test this token", elem_id="translator-explain-run")
            go_all = gr.Button("Test every token", elem_id="translator-explain-all")
        views = explain.panel("Translator", "translator")
        every = gr.Dataframe(headers=["step", "token", "attention (chosen head)", "attention (last layer mean)",
                                      "rollout", "gradient x input", "integrated gradients"],
                             label="Spearman with leave-one-out, per output token", interactive=False,
                             elem_id="translator-explain-every")
        inputs = [i.text, step, i.reference, v.layer, v.head]
        on(go.click, attribute, inputs, views, api_name="translate_attribution")
        on(go_all.click, attribute_all, [i.text, i.reference, v.layer, v.head], every,
           api_name="translate_attribution_all", concurrency_limit=1, concurrency_id="attribution-all")


def build(demo):
    with gr.Tab("Translator", id="translator") as tab:
        gr.Markdown(
            f"A small encoder–decoder Transformer ({N_ENC}+{N_DEC} layers, "
            f"{METRICS.get('training', {}).get('parameters', 0) / 1e6:.1f}M parameters) trained on Multi30k image "
            "descriptions. **Cross-attention** rows are German output tokens, columns English source tokens: "
            "each row shows where the decoder looked while writing that token. Step through the decoding "
            "with the slider; add a German reference to see how likely the model finds each of its tokens.")
        info = gr.State(time_to_live=STATE_SECONDS)
        with gr.Row():
            with gr.Column(scale=2):
                i = input_column()
            with gr.Column(scale=3):
                v = view_column()
        d = details()
        params = [links.Param("text", i.text, linked_text), links.Param("beam", i.beam),
                  links.Param("ref", i.reference, linked_reference), links.Param("view", v.component),
                  links.Param("layer", v.layer), links.Param("head", v.head), links.Param("off", i.ablate),
                  links.Param("snapshot", i.snapshot, linked_snapshot)]
        inputs = [p.component for p in params]
        outputs = [v.german, v.cross, d.step, d.step_bar, d.step_table, d.stats, d.ref_summary, d.ref_plot,
                   d.ref_table, info, v.note, v.familiar]
        on(i.run.click, translate, inputs, outputs, api_name="translate")
        on(i.text.submit, translate, inputs, outputs, api_visibility="private")
        on([i.ablate.input, i.snapshot.release], translate, inputs, outputs, api_visibility="private",
           trigger_mode="always_last")
        # .input, not .change: only a user's own change redraws (a shared link sets values by code)
        redraw = dict(fn=reselect, inputs=[info, v.component, v.layer, v.head, d.step],
                      outputs=[v.cross, d.step_bar, d.step_table], api_visibility="private", trigger_mode="always_last")
        on([v.component.input, v.layer.input, v.head.input, d.step.input], **redraw)
        on(d.stats.select, select_row, None, [v.component, v.layer, v.head], api_visibility="private").then(
            **redraw, preprocess=False)
        explanation(i, v)
        translator_views.contrast_panel(i.text, v.layer, v.head)
        translator_views.heads_panel(i.text)
        links.share_panel("translator", params, export_view, [info, v.component, v.layer, v.head], "translator_export",
                          "the selected map")
    return {"tab": tab, "params": params, "render": (translate, inputs, outputs)}
