"""PhoBERT heads tab: Vietnamese text through vinai/phobert-base, every layer and head inspectable."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gradio as gr

from ui import explain, links, plots
from ui.common import (
    STATE_SECONDS,
    STATS_EXPLAINED,
    as_text,
    check_text,
    choose,
    log,
    on,
    quote,
    table_rows,
    user_errors,
    whole_number,
)
from ui.export import export_files
from zoo import attribution, phobert
from zoo.stats import head_table

DEFAULT = "Giảng viên giải thích rất dễ hiểu nhưng phòng học quá nóng"  # the article's sentence
EXAMPLES = [[DEFAULT, True], ["Hà Nội là thủ đô của Việt Nam .", True],
            ["Tôi là sinh_viên trường đại_học Công_nghệ .", False]]
MAX_CHARS = 2000
VIEWS = ["subword tokens", "words"]
STATS_HEADERS = ["layer", "head", "entropy (nats)", "self", "previous", "next", "<s>"]
UNAVAILABLE = ("### PhoBERT is not available here\n{reason}\n\n**What to do:** run the app where it can reach the "
               "Hugging Face Hub (a Space does), and the weights (~540 MB) download on first use; or set "
               "`PHOBERT_PATH` to a local copy of `vinai/phobert-base`. The other tabs work without it.")
BREAKDOWN_NOTE = {True: "\n\nThe parameter breakdown below is computed from the model's config.json alone.",
                  False: "\n\nWith its config.json at hand (the local folder, or the Hub's cache) this tab would "
                         "also show where its parameters are."}


class Unavailable(gr.Error):
    """PhoBERT's weights can't be had: the message says what is missing and how to fix it."""


def run(text, segment):
    text = check_text(text, "Vietnamese text", MAX_CHARS)
    try:
        return phobert.explorer().analyze(text, segment=bool(segment))
    except phobert.PhobertUnavailable as e:
        raise Unavailable(as_text(str(e)), print_exception=False) from None


def head_view(result, layer, head, view):
    """The selected head's matrix over subword tokens or over words."""
    n_layer, n_head = result.attentions.shape[:2]
    layer_i, head_i = whole_number(layer, "Layer", 1, n_layer) - 1, whole_number(head, "Head", 1, n_head) - 1
    if choose(view, VIEWS, "View") == "words":
        return result.word_attentions[layer_i, head_i], result.words, result.words
    return result.attentions[layer_i, head_i], result.tokens, result.tokens


def token_index(result, token, strict=True):
    """The query token for the top-3 table: an index into the tokens; None = the last real token.
    strict=False (a new text was analysed): a token the new text doesn't have falls back to None."""
    last_word = len(result.tokens) - 2
    if token is None or token == "":
        return last_word
    try:
        return whole_number(token, "Token", 0, len(result.tokens) - 1)
    except ValueError:
        if strict:
            raise
        return last_word


def detail(result, layer, head, token, view, strict=True):
    """Selected head's heatmap + where the chosen token attends in every head of that layer."""
    w, q, k = head_view(result, layer, head, view)
    fig = plots.attention_heatmap(w, q, k, f"PhoBERT layer {int(layer)}, head {int(head)} ({view})")
    t = token_index(result, token, strict)
    top = [[f"H{h + 1}"] + [f"{tok} ({wt:.3f})" for tok, wt in phobert.top_attended(result, t, int(layer) - 1, h)]
           for h in range(result.attentions.shape[1])]
    return fig, top


def summary_text(result):
    return (f"Segmented: {result.segmented}\nTokens ({len(result.tokens)}): {' | '.join(result.tokens)}\n"
            f"Words ({len(result.words)}): {' | '.join(result.words)}")


def breakdown_rows(b):
    """The parameter table of a breakdown (zoo.phobert.parameter_breakdown), or [] for None."""
    if not b:
        return []
    total = b["total"]
    rows = [["total", total, 1.0], ["embeddings", b["embeddings"], b["embeddings_share"]],
            [f"encoder blocks ({b['n_blocks']})", b["blocks"], b["blocks"] / total],
            ["per block: attention", b["per_block_attention"], b["per_block_attention"] / total],
            ["per block: feed-forward", b["per_block_feed_forward"], b["per_block_feed_forward"] / total],
            ["per block: layer norms", b["per_block_layer_norm"], b["per_block_layer_norm"] / total],
            ["other (pooler)", total - b["embeddings"] - b["blocks"], (total - b["embeddings"] - b["blocks"]) / total]]
    return [[name, f"{n:,}", f"{share:.1%}"] for name, n, share in rows]


@user_errors
def analyze(text, segment=True, layer=1, head=1, token=None, view="subword tokens"):
    """/phobert: segmentation and tokens (plain text) first; then the status line, the layer x head
    entropy map, the selected head, the top-3 table, entropy and <s> share by layer, per-head
    statistics, the parameter breakdown, the token choices and the state."""
    result = run(text, segment)
    n_layer, n_head = result.attentions.shape[:2]
    fig, top = detail(result, layer, head, token, view, strict=False)
    layers = list(range(1, n_layer + 1))
    entropy_map = plots.grid_heatmap(result.head_entropy, [f"layer {i}" for i in layers],
                                     [f"head {h + 1}" for h in range(n_head)],
                                     f"Mean attention entropy per head (nats; uniform = ln {len(result.tokens)} "
                                     f"= {result.max_entropy:.2f})", "head", "layer", zmin=0,
                                     zmax=result.max_entropy, colorbar_title="nats")
    entropy_fig = plots.line_chart(layers, {"mean entropy": result.layer_entropy,
                                            "maximum (uniform), ln T": [result.max_entropy] * n_layer},
                                   "Attention entropy by layer", "layer", "nats", dash={"maximum (uniform), ln T"})
    bos_fig = plots.bar_chart([str(i) for i in layers], result.bos_share, "Share of attention going to <s>",
                              "layer", "share")
    stats = head_table(result.attentions)
    status = (f"PhoBERT ({phobert.explorer().source}): {n_layer} layers × {n_head} heads, "
              f"{len(result.tokens)} tokens, {len(result.words)} words.")
    choices = [(f"{i}: {t}", i) for i, t in enumerate(result.tokens)]
    breakdown = breakdown_rows(phobert.explorer().breakdown())
    return (summary_text(result), status, gr.Column(visible=True), entropy_map, fig, top, entropy_fig, bos_fig,
            table_rows(stats), breakdown,
            gr.Dropdown(choices=choices, value=token_index(result, token, strict=False)),
            gr.Slider(maximum=n_layer), gr.Slider(maximum=n_head), result)


@user_errors
def reselect(result, layer, head, token, view):
    if result is None:
        raise ValueError("Analyse a sentence first.")
    return detail(result, layer, head, token, view)


@user_errors
def export_view(result, layer, head, view):
    if result is None:
        raise ValueError("Analyse a sentence first.")
    w, q, k = head_view(result, layer, head, view)
    what = f"layer {int(layer)}, head {int(head)} ({view})"
    return export_files(w, q, k, f"phobert-{what}", model=phobert.explorer().source, view=what,
                        input=result.segmented, title=f"PhoBERT {what}")


def on_load(*args):
    """The tab's first view: like /phobert, but when PhoBERT can't be had the tab explains itself in
    place (no error pop-up): what is missing, what to do, and the parameter breakdown its config
    gives; the empty analysis views are hidden."""
    try:
        return analyze(*args)
    except Unavailable as e:
        breakdown = phobert.explorer().breakdown()
        message = UNAVAILABLE.format(reason=e.message) + BREAKDOWN_NOTE[breakdown is not None]
        return ("", message, gr.Column(visible=False), *[gr.skip()] * 6, breakdown_rows(breakdown),
                *[gr.skip()] * 4)


def linked_text(text):
    return check_text(text, "Vietnamese text", MAX_CHARS)


def linked_token(value):
    """A link's query token: a position among the (at most 256) tokens; the tab falls back to the
    last word when the text is shorter."""
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"must be a whole number from 0 to 255; the link gave {quote(value)}") from None
    return whole_number(number, "Token", 0, 255)


FILL_DEFAULT = "Hà Nội là <mask> của Việt Nam ."


@user_errors
def fill_mask(text, layer=1, head=1, segment=True):
    """/phobert_fill_mask: PhoBERT's top 5 words for the one <mask> in the text, and whether its
    attention explains the top one: the five methods over the context tokens."""
    text = check_text(text, "text with <mask>", MAX_CHARS)
    try:
        filled = phobert.fill_mask(phobert.explorer(), text, segment=bool(segment))
    except phobert.PhobertUnavailable as e:
        raise Unavailable(as_text(str(e)), print_exception=False) from None
    n_layer, n_head = filled.attentions.shape[:2]
    layer, head = whole_number(layer, "Layer", 1, n_layer) - 1, whole_number(head, "Head", 1, n_head) - 1
    rows = attribution.attention_rows(filled.attentions, filled.mask_index, layer, head)
    report = attribution.explain(filled.target, rows)
    top = ", ".join(f"{t} ({p:.3f})" for t, p in filled.top)
    what = (f"{filled.segmented}\nPhoBERT's top {len(filled.top)} for {phobert.MASK}: {top}\nExplaining "
            f"{filled.top[0][0]!r} (log-probability {report['target']:.3f}); baseline: the <mask> embedding")
    text_out, scores, curves, table = explain.views(report, filled.tokens, what, f"What drives {filled.top[0][0]!r}")
    return text_out, [[i + 1, t, round(p, 4)] for i, (t, p) in enumerate(filled.top)], scores, curves, table


def select_row(evt: gr.SelectData):
    return evt.row_value[0], evt.row_value[1]


def preload_in_background():
    """Start loading PhoBERT (a ~540 MB download on first start) without delaying the app's start."""
    def load():
        try:
            phobert.explorer().load()
        except (phobert.PhobertUnavailable, ValueError) as e:
            log.warning("PhoBERT not available: %s", e)

    threading.Thread(target=load, name="phobert-preload", daemon=True).start()


def analysis_views():
    """Everything that shows an analysis: hidden, with its empty frames, while PhoBERT is unavailable."""
    with gr.Column() as column:
        overview = gr.Plot(label="Layer × head overview", elem_id="phobert-overview")
        with gr.Row():
            layer = gr.Slider(1, 12, value=1, step=1, label="Layer", elem_id="phobert-layer")
            head = gr.Slider(1, 12, value=1, step=1, label="Head", elem_id="phobert-head")
            view = gr.Radio(VIEWS, value="subword tokens", label="View", elem_id="phobert-view")
        with gr.Row():
            heat = gr.Plot(label="Selected head", elem_id="phobert-heatmap")
            with gr.Column():
                token = gr.Dropdown(label="Where does this token attend? (top 3 per head of the selected layer)",
                                    choices=[], value=None, allow_custom_value=True, elem_id="phobert-token")
                top = gr.Dataframe(headers=["head", "1st", "2nd", "3rd"], interactive=False, elem_id="phobert-top")
        with gr.Row():
            entropy_fig = gr.Plot(label="Entropy by layer", elem_id="phobert-entropy")
            bos_fig = gr.Plot(label="<s> share by layer", elem_id="phobert-bos")
        with gr.Accordion("Per-head statistics for this text", open=False, elem_id="phobert-stats-box"):
            gr.Markdown("Click a row to show that head. " + STATS_EXPLAINED)
            stats = gr.Dataframe(headers=STATS_HEADERS, interactive=False, elem_id="phobert-stats")
    return SimpleNamespace(column=column, overview=overview, layer=layer, head=head, view=view, heat=heat,
                           token=token, top=top, entropy_fig=entropy_fig, bos_fig=bos_fig, stats=stats)


def fill_panel(a, segment):
    """Fill-mask, and a test of whether attention explains its answer (computed on request)."""
    with gr.Accordion("Fill the mask, and is attention an explanation?", open=False, elem_id="phobert-fill"):
        gr.Markdown("Write a sentence with `<mask>` where a word should be; PhoBERT's masked-LM head proposes "
                    "five, and the top one is explained over the other tokens. Attention: the layer and head "
                    "chosen above, the row of the masked position.")
        with gr.Row():
            box = gr.Textbox(FILL_DEFAULT, label="text with <mask>", max_length=MAX_CHARS, elem_id="phobert-fill-input",
                             scale=4)
            go = gr.Button("Fill and test", elem_id="phobert-fill-run", scale=1)
        top = gr.Dataframe(headers=["rank", "word", "probability"], interactive=False, elem_id="phobert-fill-top")
        text, scores, curves, table = explain.panel("PhoBERT", "phobert")
        on(go.click, fill_mask, [box, a.layer, a.head, segment], [text, top, scores, curves, table],
           api_name="phobert_fill_mask")


def build(demo):
    with gr.Tab("PhoBERT heads", id="phobert") as tab:
        gr.Markdown(
            "[PhoBERT](https://huggingface.co/vinai/phobert-base) is a RoBERTa for Vietnamese. Vietnamese writes a "
            "space between syllables, so the text is first **word-segmented** with pyvi (syllables of a word joined "
            "by `_`), then split into subword pieces (`@@` marks a piece that continues).")
        result = gr.State(time_to_live=STATE_SECONDS)
        with gr.Row():
            with gr.Column(scale=2):
                text = gr.Textbox(DEFAULT, label="Vietnamese text", lines=2, max_length=MAX_CHARS,
                                  elem_id="phobert-input")
                segment = gr.Checkbox(True, label="Segment words with pyvi (untick if you joined syllables with _)")
                btn = gr.Button("Analyse", variant="primary", elem_id="phobert-run")
                gr.Examples(EXAMPLES, inputs=[text, segment])
            with gr.Column(scale=3):
                summary = gr.Textbox(label="Segmentation and tokens", lines=3, interactive=False,
                                     elem_id="phobert-output")
                status = gr.Markdown(elem_id="phobert-status")
        a = analysis_views()
        gr.Markdown("### Where the parameters are")
        params = gr.Dataframe(headers=["part", "parameters", "share"], interactive=False, elem_id="phobert-params")
        link_params = [links.Param("text", text, linked_text), links.Param("segment", segment),
                       links.Param("layer", a.layer), links.Param("head", a.head),
                       links.Param("token", a.token, linked_token), links.Param("view", a.view)]
        inputs = [p.component for p in link_params]
        outputs = [summary, status, a.column, a.overview, a.heat, a.top, a.entropy_fig, a.bos_fig, a.stats, params,
                   a.token, a.layer, a.head, result]
        on(btn.click, analyze, inputs, outputs, api_name="phobert")
        on(text.submit, analyze, inputs, outputs, api_visibility="private")
        redraw = dict(fn=reselect, inputs=[result, a.layer, a.head, a.token, a.view], outputs=[a.heat, a.top],
                      api_visibility="private")
        on([a.layer.release, a.head.release, a.token.input, a.view.input], trigger_mode="always_last", **redraw)
        on(a.stats.select, select_row, None, [a.layer, a.head], api_visibility="private").then(
            **redraw, preprocess=False)
        fill_panel(a, segment)
        links.share_panel("phobert", link_params, export_view, [result, a.layer, a.head, a.view], "phobert_export",
                          "the selected head")
    # The default view is remembered only once PhoBERT has answered (it may still be loading).
    return {"tab": tab, "params": link_params, "render": (on_load, inputs, outputs),
            "keep": lambda view: bool(view[0])}
