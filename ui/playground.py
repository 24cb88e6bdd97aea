"""Train it yourself: design a tiny Transformer, train it live, watch its attention form, probe it.

The tasks, the models and the training loop are zoo.playground's; this tab drives them. One run at a
time for the whole server (the others wait in the queue and see their place); a run stops after
zoo.playground.MAX_SECONDS. The trained model lives in the visitor's session only (a gr.State that
expires), and downloads as model.safetensors + config.json.
"""

from __future__ import annotations

import json
import threading
import uuid
from types import SimpleNamespace

import gradio as gr

import zoo
from ui import links, plots
from ui.common import STATE_SECONDS, on, user_errors
from ui.export import EXPORT_DIR, clean_exports
from ui.sorter import overview_figure
from zoo import playground as pg

_stops, _stops_lock = set(), threading.Lock()  # sessions whose run should stop at its next report


def marks_html(predictions, answers):
    """The predictions, one box per position, green when right, red (with the answer) when wrong."""
    cells = [f'<span class="digit {"ok" if p == t else "bad"}" title="position {i}: predicted {p}, correct {t}">{p}'
             f'<small>{"✓" if p == t else "✗ " + str(t)}</small></span>'
             for i, (p, t) in enumerate(zip(predictions, answers, strict=True))]
    right = sum(p == t for p, t in zip(predictions, answers, strict=True))
    return f'<div class="sorter-marks">{"".join(cells)}</div><p>{right}/{len(answers)} positions right</p>'


def curves_figure(progress):
    fig = plots.line_chart([s for s, _ in progress.loss], {"training loss": [v for _, v in progress.loss]},
                           "Loss and accuracy", "step", "loss", log_y=True, height=320)
    fig.data.append({"type": "scatter", "x": [s for s, _ in progress.accuracy], "y": [a for _, a in progress.accuracy],
                     "mode": "lines+markers", "name": "accuracy (500 fixed sequences)", "yaxis": "y2"})
    fig.layout["yaxis2"] = {"title": {"text": "accuracy"}, "overlaying": "y", "side": "right", "range": [0, 1]}
    return fig


def status_line(design, progress, result=None):
    head = (f"{design.task}, positions {design.positions}, {'causal' if design.causal else 'bidirectional'}, "
            f"{design.norm}-LN, {design.n_layer} layer(s) x {design.n_head} head(s), d_model {design.d_model}, "
            f"{design.seq_len} digits; step {progress.step} of {design.steps}, {progress.seconds:.0f} s")
    if progress.stopped_by_time:
        head += f" (stopped at the {pg.MAX_SECONDS} s limit)"
    if result is None:
        return head
    line = (f"{head}.\nOn {result['sequences']:,} fresh sequences: per-position accuracy "
            f"{result['per_position_accuracy']:.4f}, whole-sequence accuracy {result['sequence_accuracy']:.4f}")
    if result.get("ceiling_without_positions") is not None:
        line += f"; the ceiling for any model without positions: {result['ceiling_without_positions']:.4f} per position"
    if "step_by_step" in result:
        line += (f"; step by step (no future inputs): per position "
                 f"{result['step_by_step']['per_position_accuracy']:.4f}")
    return line + "."


def results_rows(result):
    rows = [["per-position accuracy", result["per_position_accuracy"]],
            ["whole-sequence accuracy", result["sequence_accuracy"]]]
    if "ceiling_without_positions" in result:
        ceiling = result["ceiling_without_positions"]
        rows.append(["ceiling without positions (per position)", "none: solvable" if ceiling is None else ceiling])
    if "step_by_step" in result:
        rows += [["step by step, per position", result["step_by_step"]["per_position_accuracy"]],
                 ["step by step, whole sequence", result["step_by_step"]["sequence_accuracy"]]]
    return rows + [["parameters", f"{result['parameters']:,}"]]


def length_figure(result, design):
    lengths = result["accuracy_by_length"]
    fig = plots.line_chart(list(lengths), {"per-position accuracy": list(lengths.values())},
                           "Accuracy by input length", "digits in the input", "accuracy", height=320)
    fig.layout["shapes"] = [{"type": "line", "x0": design.seq_len, "x1": design.seq_len, "y0": 0, "y1": 1,
                             "line": {"dash": "dot", "color": "#999"}}]
    fig.layout["annotations"] = [{"text": "trained length", "x": design.seq_len, "y": 1, "showarrow": False,
                                  "yanchor": "bottom"}]
    if design.positions == "learned":
        fig.layout["title"]["text"] += " (learned positions past the trained length never saw training)"
    return fig


def save_run(model, design, result, progress):
    """model.safetensors + config.json (DigitTransformer.from_pretrained reads them) and the run's
    metrics, in a fresh folder of the export area."""
    clean_exports()
    folder = EXPORT_DIR / f"playground-{uuid.uuid4().hex[:12]}"
    model.save_pretrained(folder)
    metrics = {**result, "loss_curve": progress.loss, "accuracy_curve": progress.accuracy, "steps_done": progress.step}
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return [str(folder / name) for name in ("model.safetensors", "config.json", "metrics.json")]


@user_errors
def train(task, positions, causal, n_layer, n_head, d_model, seq_len, steps, seed, norm="pre", lr=5e-3,
          mistake="none", variable_lengths=False, request: gr.Request = None, progress=gr.Progress()):
    """/train: trains a fresh model and streams updates. Each update's first output is plain text;
    the last one gives the per-position and whole-sequence accuracy on fresh sequences."""
    design = pg.design_from(dict(task=task, positions=positions, causal=causal, n_layer=n_layer, n_head=n_head,
                                 d_model=d_model, seq_len=seq_len, steps=steps, seed=seed, norm=norm, lr=lr,
                                 mistake=mistake, variable_lengths=variable_lengths)).check()
    session = getattr(request, "session_hash", None)
    probe = pg.default_probe(design)
    every = min(100, max(10, design.steps // 5))
    for model, p in pg.watch(design, probe, every=every):
        progress(p.step / design.steps, desc=f"step {p.step} of {design.steps}")
        stop = stop_requested(session)
        view = (curves_figure(p), overview_figure(p.probe_maps, f"Attention on {' '.join(map(str, probe))}"),
                marks_html(p.probe_predictions, p.probe_targets))
        if not (p.done or stop):
            yield status_line(design, p), *view, gr.skip(), gr.skip(), gr.skip(), gr.skip()
            continue
        result = pg.evaluate(model, design)
        run = SimpleNamespace(model=model, design=design, result=result)
        yield (status_line(design, p, result), *view, results_rows(result), length_figure(result, design),
               save_run(model, design, result, p), run)
        return


def stop_requested(session):
    with _stops_lock:
        if session in _stops:
            _stops.discard(session)
            return True
    return False


def stop(request: gr.Request):
    """The Stop button: this visitor's run ends at its next report, and keeps the model as it is."""
    with _stops_lock:
        _stops.add(request.session_hash)
    return "Stopping: the model is kept as it is at the next report."


@user_errors
def probe(text, run):
    """/probe: the session's trained model on typed digits: its output, marked, and its attention."""
    if run is None:
        raise ValueError("Train a model first (or wait for the run to finish).")
    digits = pg.parse_probe(text, run.design)
    maps, predictions, answers = pg.probe_view(run.model, run.design, digits)
    text = (f"input {' '.join(map(str, digits))} -> output {' '.join(map(str, predictions))}; "
            f"{sum(p == t for p, t in zip(predictions, answers, strict=True))}/{len(answers)} positions right "
            f"({run.design.task}: {pg.TASKS[run.design.task]})")
    return text, marks_html(predictions, answers), overview_figure(maps, f"Attention on {' '.join(map(str, digits))}")


def preset_values(name):
    """A preset's settings, in the design inputs' order."""
    design = pg.PRESETS[name]
    return [getattr(design, field) for field in FIELDS]


FIELDS = ("task", "positions", "causal", "n_layer", "n_head", "d_model", "seq_len", "steps", "seed", "norm", "lr",
          "mistake", "variable_lengths")


def design_inputs():
    d = pg.Design()
    task = gr.Radio(list(pg.TASKS), value=d.task, label="Task", elem_id="play-task",
                    info="; ".join(f"{k}: {v}" for k, v in pg.TASKS.items()))
    positions = gr.Radio(list(zoo.sorter.POSITIONS), value=d.positions, label="Positional encoding",
                         elem_id="play-positions")
    with gr.Row():
        causal = gr.Checkbox(d.causal, label="Causal mask (each position sees only itself and earlier ones)",
                             elem_id="play-causal")
        norm = gr.Radio(list(pg.NORMS), value=d.norm, label="Layer norm: pre-LN (the article) or post-LN (the paper)",
                        elem_id="play-norm")
    with gr.Row():
        n_layer = gr.Slider(*pg.LIMITS["n_layer"], value=d.n_layer, step=1, label="layers", elem_id="play-layers")
        n_head = gr.Slider(*pg.LIMITS["n_head"], value=d.n_head, step=1, label="heads", elem_id="play-heads")
        d_model = gr.Slider(*pg.LIMITS["d_model"], value=d.d_model, step=4, label="d_model", elem_id="play-dmodel")
        seq_len = gr.Slider(*pg.LIMITS["seq_len"], value=d.seq_len, step=1, label="digits", elem_id="play-seqlen")
    with gr.Row():
        steps = gr.Slider(*pg.LIMITS["steps"], value=d.steps, step=1, label="steps", elem_id="play-steps")
        lr = gr.Number(d.lr, label="peak learning rate", minimum=pg.LR_RANGE[0], maximum=pg.LR_RANGE[1],
                       elem_id="play-lr")
        seed = gr.Number(d.seed, precision=0, minimum=0, maximum=pg.LIMITS["seed"][1], label="seed",
                         elem_id="play-seed")
    mistake = gr.Radio(list(pg.MISTAKES), value=d.mistake, label="Break it on purpose: one of the article's mistakes",
                       elem_id="play-mistake")
    variable = gr.Checkbox(d.variable_lengths, label="Train on lengths 2..digits, padded (a padding mask)",
                           elem_id="play-variable")
    return [task, positions, causal, n_layer, n_head, d_model, seq_len, steps, seed, norm, lr, mistake, variable]


def findings_markdown():
    """The benchmark's table (benchmarks/playground.py), as zoo records it."""
    table = zoo.findings("playground")
    if not table:
        return "Not measured yet: `python -m benchmarks.playground --write`."
    return table.get("markdown", "")


def build(demo):
    with gr.Tab("Train it yourself", id="playground") as tab:
        gr.Markdown("Design a tiny Transformer, train it here and watch its attention form. Switch positions off "
                    "and watch the sorter fail; pick a task that needs none and watch the same model succeed. "
                    f"One run at a time for everyone (you will see your place in the queue), at most "
                    f"{pg.MAX_SECONDS} s, at most {pg.MAX_PARAMETERS:,} parameters.")
        run = gr.State(time_to_live=STATE_SECONDS)
        with gr.Row():
            with gr.Column(scale=2):
                preset = gr.Radio(list(pg.PRESETS), value=None, label="Presets", elem_id="play-preset")
                inputs = design_inputs()
                with gr.Row():
                    go = gr.Button("Train", variant="primary", elem_id="play-train")
                    halt = gr.Button("Stop", elem_id="play-stop")
            with gr.Column(scale=3):
                status = gr.Textbox(label="Run", lines=3, interactive=False, elem_id="play-status")
                curves = gr.Plot(label="Loss and accuracy", elem_id="play-curves")
                marks = gr.HTML(elem_id="play-marks")
                attention = gr.Plot(label="Every layer and head on the probe input", elem_id="play-attention")
        with gr.Row():
            results = gr.Dataframe(headers=["measure", "value"], interactive=False, label="After training",
                                   elem_id="play-results")
            lengths = gr.Plot(label="Shorter and longer inputs", elem_id="play-lengths")
        files = gr.File(label="The trained model (model.safetensors + config.json) and the run's metrics",
                        file_count="multiple", interactive=False, elem_id="play-files")
        gr.Markdown("### Probe the trained model")
        with gr.Row():
            probe_box = gr.Textbox("7 2 9 2 5 0 8 3", label="digits", elem_id="play-probe-input")
            probe_go = gr.Button("Probe", elem_id="play-probe")
        probe_text = gr.Textbox(label="Output", interactive=False, elem_id="play-probe-output")
        probe_marks = gr.HTML()
        probe_attention = gr.Plot(label="Attention", elem_id="play-probe-attention")
        with gr.Accordion("What we measured (about 110 short runs)", open=False, elem_id="play-findings"):
            gr.Markdown(findings_markdown())
        outputs = [status, curves, attention, marks, results, lengths, files, run]
        job = on(go.click, train, inputs, outputs, api_name="train", concurrency_limit=1, concurrency_id="training")
        on(halt.click, stop, None, status, api_visibility="private", queue=False)
        on(preset.input, preset_values, preset, inputs, api_visibility="private")
        on([probe_go.click, probe_box.submit], probe, [probe_box, run], [probe_text, probe_marks, probe_attention],
           api_name="probe")
        params = [links.Param(name, c) for name, c in zip(FIELDS, inputs, strict=True)]
        with gr.Accordion("Link to these settings", open=False, elem_id="playground-share"):
            links.add_link_button("playground", params)
    return {"tab": tab, "params": params, "render": None, "job": job}
