"""The floor the classroom benchmark measures the app against: the least a Gradio page with a heatmap
can cost on this framework. One Textbox, a Button and a gr.Plot; the page load and each click
return a line of text and one 8x8 plotly heatmap.

    python -m benchmarks.floor_app --port 7870
"""

from __future__ import annotations

import argparse

import gradio as gr
import numpy as np
import plotly.graph_objects as go


def heatmap(text):
    """A line of text and an 8x8 heatmap that depends on it (so nothing can be served from memory)."""
    rng = np.random.default_rng(abs(hash(text)) % 2**32)
    z = rng.random((8, 8))
    fig = go.Figure(go.Heatmap(z=z / z.sum(1, keepdims=True), colorscale="Blues", zmin=0, zmax=1))
    fig.update_layout(title="attention", height=400)
    return f"{len(text)} characters", fig


with gr.Blocks(title="floor") as demo:
    box = gr.Textbox("7 2 9 2 5 0 8 3", elem_id="floor-input")
    button = gr.Button("Go", elem_id="floor-run")
    answer = gr.Textbox(elem_id="floor-answer")
    plot = gr.Plot(elem_id="floor-heatmap")
    button.click(heatmap, box, [answer, plot], api_name="predict")
    demo.load(heatmap, box, [answer, plot])
demo.queue()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=7870)
    demo.launch(server_name="127.0.0.1", server_port=p.parse_args().port, show_error=False)
