""""Is attention an explanation?": the views every model tab shows for one explained prediction
(zoo.attribution): a line per method, the methods' scores over the input tokens, the deletion
curves, and what the numbers mean."""

from __future__ import annotations

import gradio as gr
import numpy as np

from ui import plots
from zoo import attribution

MEANING = ("**Reading it.** Leave-one-out is the reference: how much the prediction's log-probability drops when a "
           "token alone is replaced by the baseline. A Spearman near 1 means a method ranks the tokens the way that "
           "test does; near 0, it does not, whatever its heatmap suggests. AOPC is how fast the prediction's "
           "probability falls as the method's top tokens are removed one by one (higher: it found what the "
           "prediction needs sooner); compare it with random order. **This is one input**: whether attention "
           "explains this model needs many, which the model card reports (the `faithfulness` table).")
HEADERS = ["method", "Spearman with leave-one-out", "AOPC", "AOPC, random order"]


def text_of(report, what):
    """The plain-text answer: what was explained, then one line per method."""
    lines = [what, *attribution.summary_lines(report)]
    change = report["target"] - report["baseline_target"]
    lines.append(f"integrated gradients: {attribution.IG_STEPS} steps, convergence delta {report['ig_delta']:.2g} "
                 f"against f(input) - f(baseline) = {change:.3g}"
                 + (" (not converged: trust it less)" if report["ig_delta"] > 0.05 * max(abs(change), 1e-3) else ""))
    return "\n".join(lines)


def scores_figure(report, tokens, title):
    """Methods (rows) x input tokens (columns), each row scaled to its largest |score|, signs kept."""
    labels = list(report["scores"])
    z = []
    for label in labels:
        s = np.asarray(report["scores"][label], dtype=float)
        z.append((s / (np.abs(s).max() or 1.0)).round(3).tolist())
    raw = [[f"{v:.3g}" for v in report["scores"][label]] for label in labels]
    heat = {"type": "heatmap", "z": z, "x": list(range(len(tokens))), "y": list(range(len(labels))), "zmin": -1,
            "zmax": 1, "zmid": 0, "colorscale": plots.DIVERGING, "reversescale": True, "customdata": raw,
            "hovertemplate": "%{y}, token %{x}: %{customdata}<extra></extra>", "colorbar": {"thickness": 12}}
    return plots.Figure(data=[heat], layout=plots.layout(
        title, "input token", "", height=80 + 36 * len(labels) + 120,
        xaxis=plots.ticks([plots.label(t) for t in tokens], tickangle=-45 if len(tokens) > 8 else 0),
        yaxis=plots.ticks([plots.label(label) for label in labels], autorange="reversed"),
        **plots.fixed_width(len(tokens))))


def curves_figure(report):
    faith = report["faithfulness"]
    n = len(faith["random"]["curve"])
    unit = report.get("curve_unit", "probability")
    return plots.line_chart(range(n), {k: v["curve"] for k, v in faith.items()},
                            f"Deletion: the prediction's {unit} as top tokens go",
                            "tokens removed (the method's top first)", unit, dash={"random"}, height=360)


def table_rows(report):
    random = report["faithfulness"]["random"]["aopc"]
    return [[method, "undefined" if f["spearman"] is None else round(f["spearman"], 3), round(f["aopc"], 3),
             round(random, 3)] for method, f in report["faithfulness"].items() if method != "random"]


def views(report, tokens, what, title):
    """(text, scores figure, deletion curves, table) for one report."""
    return text_of(report, what), scores_figure(report, tokens, title), curves_figure(report), table_rows(report)


def panel(label, elem):
    """The outputs of an explanation, in a closed box (computed on request only). Returns the box's
    output components, in the order views() fills them."""
    text = gr.Textbox(label="Per method: Spearman with leave-one-out, and AOPC", lines=8, interactive=False,
                      elem_id=f"{elem}-explain-text")
    with gr.Row():
        scores = gr.Plot(label="Scores over the input tokens", elem_id=f"{elem}-explain-scores")
        curves = gr.Plot(label="Deletion curves", elem_id=f"{elem}-explain-curves")
    table = gr.Dataframe(headers=HEADERS, interactive=False, elem_id=f"{elem}-explain-table")
    gr.Markdown(MEANING)
    return [text, scores, curves, table]
