"""The translator tab's views computed on request, each from its own button and endpoint: which heads
matter (for the user's sentence and over val), and why the model wrote this word and not that one."""

from __future__ import annotations

import math

import gradio as gr
import numpy as np

import zoo
from ui import explain, plots
from ui.common import check_text, choose, model, on, quote, user_errors, whole_number
from zoo import attribution, decoding, heads

NAME = "translator-en-de"
MAX_CHARS = 600
MAX_WORD = 40  # an alternative is a word or a few, not a sentence
KIND_ROWS = {"encoder": "enc", "decoder_self": "dec", "cross": "cross"}  # grid rows: 'enc L1', ..., 'cross L3'


def forced_output(net, text, reference=""):
    """(source ids, output ids ending with </s>, whose output it is): the reference when one is given,
    else the model's own beam-5 translation, both read by teacher forcing."""
    text = check_text(text, "English sentence", MAX_CHARS)
    src_ids = net.encode_text(text) + [net.eos_id]
    if isinstance(reference, str) and reference.strip():
        ref = check_text(reference, "German reference", MAX_CHARS)
        return src_ids, net.encode_text(ref, role="reference") + [net.eos_id], "the reference"
    hyp = decoding.beam_search(net, net.batch_source([text]), 5)[0]
    return src_ids, hyp + [net.eos_id], "the model's translation"


def attention_choice(net, layer, head):
    """The decoder layer and head (0-based) the tab's radios chose; 'average' reads as head 1."""
    n_layer, n_head = len(net.decoder), net.decoder[0].cross_attn.n_head
    layer = int(choose(layer, [str(i + 1) for i in range(n_layer)], "Layer (of the decoder)")) - 1
    head = 0 if head == "average" else int(choose(head, [str(h + 1) for h in range(n_head)], "Head")) - 1
    return layer, head


def cross_rows(net, src_ids, out_ids, step, layer, head):
    """The attention-based scores of output token `step`: the chosen head's cross-attention row, the
    last decoder layer's mean, and the encoder's rollout read through that layer."""
    cross, composed = attribution.translator_maps(net, src_ids, out_ids)
    return attribution.attention_rows(cross, step, layer, head, composed[-1])


# ----- which heads matter --------------------------------------------------------------------------

def grid_figure(grids, title, colorbar, fmt=".2f"):
    """{kind: (n_layer, n_head)} -> one heatmap, rows 'enc L1' .. 'cross L3', columns heads."""
    rows = [f"{KIND_ROWS[kind]} L{layer + 1}" for kind, g in grids.items() for layer in range(len(g))]
    values = np.concatenate([np.asarray(g, dtype=float) for g in grids.values()])  # (kinds x layers, H)
    return plots.grid_heatmap(values, rows, [f"H{h + 1}" for h in range(values.shape[1])], title, "head",
                              "attention (kind, layer)", fmt=fmt, colorbar_title=colorbar, signed=True)


def corpus_views(net):
    """The val-set figures of training.head_importance (None where it has not been run)."""
    record = zoo.metrics(NAME).get("head_importance")
    if not record:
        return None, None, "Over val: not measured yet (python -m training.head_importance)."
    grids = {kind: np.zeros(shape) for kind, shape in heads.grid_shape(net).items()}
    kinds = {name: kind for kind, name in heads.KIND_NAMES.items()}
    for r in record["rows"]:
        grids[kinds[r["kind"]]][r["layer"] - 1, r["head"] - 1] = r["delta_bleu"]
    grid = grid_figure(grids, f"Val BLEU change with one head off (all heads: {record['base_bleu']})", "ΔBLEU")
    curves = record["pruning"]
    x = [c["pruned"] for c in next(iter(curves.values()))]
    curve = plots.line_chart(x, {f"by {name}": [c["bleu"] for c in points] for name, points in curves.items()},
                             "Pruning heads, least important first", "heads switched off", "val BLEU")
    worst = min(record["rows"], key=lambda r: r["delta_bleu"])
    line = (f"Over val ({record['sentences']} sentences): switching off {worst['kind']} L{worst['layer']}"
            f"H{worst['head']} costs most, {worst['delta_bleu']:+.2f} BLEU. {record['verdict']}")
    return grid, curve, line


@user_errors
def translate_heads(text):
    """/translate_heads: for the user's sentence, the change in its translation's log-probability
    (teacher-forced) with each head switched off alone; then the val-set grid and pruning curves."""
    net = model(NAME)
    src_ids, out_ids, _ = forced_output(net, text)
    base, grids = heads.sentence_effects(net, src_ids, out_ids)
    ranked = sorted(((float(g[layer, head]), f"{KIND_ROWS[kind]} L{layer + 1}H{head + 1}")
                     for kind, g in grids.items() for layer in range(len(g)) for head in range(g.shape[1])))
    grid = grid_figure({k: g.numpy() for k, g in grids.items()},
                       "This sentence: log-probability change with one head off", "Δ log p")
    corpus_grid, curve, corpus_line = corpus_views(net)
    lines = [f"Translation: {net.decode_ids(out_ids[:-1])} ({len(out_ids)} tokens with </s>, log-probability "
             f"{base:.2f} with every head, teacher-forced).",
             "Switched off alone, these heads lower it most: " + ", ".join(f"{n} {d:+.2f}" for d, n in ranked[:3]),
             "and these least (or raise it): " + ", ".join(f"{n} {d:+.2f}" for d, n in ranked[-3:][::-1]),
             corpus_line]
    return "\n".join(lines), grid, corpus_grid, curve


# ----- why this word and not that one --------------------------------------------------------------

def pieces_note(net, word, pieces):
    if len(pieces) == 1:
        return ""
    shown = ", ".join(net.token_strings(pieces))
    return (f" {quote(word)} is {len(pieces)} pieces of the model's vocabulary ({shown}): its log-probability is "
            "the sum of the pieces', each given the prefix and the pieces before it (the chance the model writes "
            "exactly those pieces next).")


def top_tokens(report, tokens, method="integrated gradients", k=3):
    scores = report["scores"][method]
    order = sorted(range(len(tokens)), key=lambda i: -abs(scores[i]))[:k]
    return ", ".join(f"{tokens[i]} {scores[i]:+.2f}" for i in order)


@user_errors
def translate_contrast(text, output_step=0, alternative="", layer="1", head="1"):
    """/translate_contrast: at output step output_step (from 0) of the model's own translation, why
    the chosen token and not `alternative`: both probabilities, the log-probability difference, and
    that difference attributed to the source tokens by every method."""
    net = model(NAME)
    src_ids, out_ids, _ = forced_output(net, text)
    step = whole_number(output_step, "The output step", 0, len(out_ids) - 1)
    if not isinstance(alternative, str):
        raise ValueError("The alternative must be text: a German word or piece.")
    word = check_text(alternative, "alternative", MAX_WORD) if alternative.strip() else ""
    chosen = out_ids[step]
    pieces = attribution.alternative_pieces(net, chosen, word)
    room = net.max_len - step  # the decoder reads <s>, the prefix and all but the last piece
    if len(pieces) > room:
        raise ValueError(f"The alternative {quote(word)} is {len(pieces)} pieces of the model's vocabulary; after "
                         f"step {step} at most {room} fit. Type a shorter word.")
    token = net.token_strings([chosen])[0]
    if pieces == [chosen]:
        raise ValueError(f"The alternative {quote(word)} is the token the model chose at step {step} ({token!r}); "
                         "type a different word to compare with it.")
    target = attribution.contrast_target(net, src_ids, out_ids[:step], [chosen], pieces)
    report = attribution.explain(target, cross_rows(net, src_ids, out_ids, step, *attention_choice(net, layer, head)))
    lp_chosen, lp_alt = attribution.continuation_log_probs(net, src_ids, out_ids[:step], [[chosen], pieces])
    diff = lp_chosen - lp_alt
    written = net.tokenizer.decode(pieces)  # whole, so that a character split into byte pieces reads as one
    alt_shown = "▁" + written[1:] if written.startswith(" ") else written
    lines = [f"Step {step} of the model's translation {quote(net.decode_ids(out_ids[:-1]), 80)}: it wrote {token!r} "
             f"(p = {math.exp(lp_chosen):.3g}); {alt_shown!r} has p = {math.exp(lp_alt):.3g}. log p({token}) - "
             f"log p({alt_shown}) = {diff:.3f}: the model prefers "
             + (f"its token, {math.exp(min(diff, 700)):.3g} times as likely." if diff > 0
                else f"the alternative, {math.exp(min(-diff, 700)):.3g} times as likely (beam search chose by the "
                     "whole sentence).") + pieces_note(net, word, pieces),
             "That difference, attributed over the source tokens (baseline: the padding embedding); integrated "
             "gradients' largest: " + top_tokens(report, net.token_strings(src_ids)) + ".",
             *attribution.summary_lines(report),
             "Attention is the same for both words: it is computed before either is written, so it cannot say why "
             "one and not the other. Its Spearman here asks whether where the model looked happens to rank the "
             "source tokens as the difference's leave-one-out does."]
    figure = explain.scores_figure(report, net.token_strings(src_ids), f"Why {token!r} and not {alt_shown!r}")
    return "\n".join(lines), figure, explain.curves_figure(report), explain.table_rows(report)


# ----- the panels ----------------------------------------------------------------------------------

def heads_panel(text):
    with gr.Accordion("Which heads matter?", open=False, elem_id="translator-heads-box"):
        gr.Markdown("Each head is switched off alone (its output zeroed) and the translation of your sentence is "
                    "read again by teacher forcing: how much less likely does it become? Beside it, the same over "
                    "the whole val set in BLEU (Michel et al. 2019; Voita et al. 2019), and what happens when heads "
                    "are pruned one after another, by two measures of importance.")
        go = gr.Button("Score every head on this sentence", elem_id="translator-heads-run")
        summary = gr.Textbox(label="Heads, for this sentence and over val", lines=5, interactive=False,
                             elem_id="translator-heads-text")
        sentence = gr.Plot(label="This sentence", elem_id="translator-heads-grid")
        with gr.Row():
            corpus = gr.Plot(label="Over val", elem_id="translator-heads-corpus")
            curve = gr.Plot(label="Pruning curves", elem_id="translator-heads-curve")
        on(go.click, translate_heads, [text], [summary, sentence, corpus, curve], api_name="translate_heads")


def contrast_panel(text, layer, head):
    with gr.Accordion("Why this word and not that one?", open=False, elem_id="translator-contrast-box"):
        gr.Markdown("Pick an output step of the model's own translation and type a word it could have written "
                    "instead (e.g. *die* where it wrote *der*). The difference of their log-probabilities is "
                    "attributed to the English tokens by the same methods as above.")
        with gr.Row():
            step = gr.Slider(0, 40, value=1, step=1, label="output token (from 0)", elem_id="translator-contrast-step")
            alternative = gr.Textbox(label="alternative", max_lines=1, max_length=MAX_WORD,
                                     elem_id="translator-contrast-alt")
            go = gr.Button("Compare", elem_id="translator-contrast-run")
        views = explain.panel("Contrast", "translator-contrast")
        on(go.click, translate_contrast, [text, step, alternative, layer, head], views,
           api_name="translate_contrast")
        on(alternative.submit, translate_contrast, [text, step, alternative, layer, head], views,
           api_visibility="private")
