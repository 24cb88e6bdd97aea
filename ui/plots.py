"""Plotly figures shared by every tab: attention heatmaps, differences, lines and bars.

Figures are plotly's own JSON format, {"data": [trace, ...], "layout": {...}}, built as plain data:
plotly.graph_objects validates every property as it is set and its serialisation copies the whole
figure again, which costs milliseconds a trace, and a tab draws a dozen per request. gr.Plot
serialises a plotly figure with its to_json(), which Figure provides.

Heatmap conventions, the same everywhere: rows are queries, columns are keys; the colour scale is
fixed to 0-1 so two maps can be compared by eye; axes are numeric positions labelled with token
text, so repeated tokens never merge into one row; token text is HTML-escaped because plotly
renders labels as HTML (an unescaped `<s>` would vanish as a strike-through tag).
"""

from __future__ import annotations

import html

import numpy as np
import plotly.colors
import plotly.io

# Colour scales as plotly.py resolves their names (plotly.js reads some names the other way round).
COLORSCALE = plotly.colors.get_colorscale("Blues")
DIVERGING = plotly.colors.get_colorscale("RdBu")
SEQUENTIAL = plotly.colors.get_colorscale("Viridis")
FONT = {"family": "Inter, Arial, sans-serif", "size": 12}
GRID = "#eee"
# Smallest readable cell, in px. Every plot is at least MIN_PLOT_WIDTH wide (app.CSS), which holds
# FIT_COLUMNS such cells; a heatmap with more columns gets a fixed width and its box scrolls sideways.
MIN_CELL, MIN_PLOT_WIDTH, FIT_COLUMNS = 22, 420, 12
# app.CSS: plots scroll sideways in their box rather than squeeze on a narrow screen.
CSS = f""".block:has(> .js-plotly-plot) {{overflow-x: auto;}}
.block > .js-plotly-plot {{min-width: {MIN_PLOT_WIDTH}px;}}"""


class Figure(dict):
    """A plotly figure as plain data; .data and .layout read like plotly's own figures."""

    @property
    def data(self):
        return self["data"]

    @property
    def layout(self):
        return self["layout"]

    def to_json(self):
        return plotly.io.to_json(dict(self), validate=False)


def label(token):
    """Token text safe for plotly labels and hovers; blank tokens stay visible."""
    token = str(token)
    if not token.strip():
        token = repr(token)
    return html.escape(token)


def layout(title, x_title, y_title, height=340, xaxis=None, yaxis=None, **extra):
    """The layout every chart shares: white plot, the app's font, titled axes."""
    return {"title": {"text": label(title), "x": 0.5}, "font": FONT, "height": height, "plot_bgcolor": "white",
            "paper_bgcolor": "white", "margin": {"l": 70, "r": 20, "t": 60, "b": 70},
            "xaxis": {"title": {"text": x_title}, **(xaxis or {})},
            "yaxis": {"title": {"text": y_title}, **(yaxis or {})}, **extra}


def square_side(n_rows, n_cols):
    """Pixel height of a heatmap of n_rows x n_cols cells, at least MIN_CELL a cell."""
    return max(300, min(620, 40 * max(n_rows, n_cols) + 160), MIN_CELL * n_rows + 140)


def fixed_width(n_cols):
    """{"width": px} for a heatmap too wide for MIN_CELL cells at the smallest plot width, else {}."""
    return {"width": MIN_CELL * n_cols + 150} if n_cols > FIT_COLUMNS else {}


def ticks(labels, **extra):
    """Numeric positions labelled with token text: repeated tokens keep their own row/column."""
    return {"tickmode": "array", "tickvals": list(range(len(labels))), "ticktext": labels, **extra}


def attention_heatmap(weights, query_tokens, key_tokens, title="Attention", diff=False,
                      x_title="key (attended to)", y_title="query (attending)"):
    """weights (T_q, T_k) -> heatmap. diff=True draws a difference map on a -1..1 scale."""
    w = np.round(np.asarray(weights, dtype=float), 4)
    q_lab = [label(t) for t in query_tokens]
    k_lab = [label(t) for t in key_tokens]
    verb = "change" if diff else "weight"
    heat = {"type": "heatmap", "z": w.tolist(), "x": list(range(w.shape[1])), "y": list(range(w.shape[0])),
            "customdata": [[[q, k] for k in k_lab] for q in q_lab], "zmin": -1 if diff else 0, "zmax": 1,
            "colorscale": DIVERGING if diff else COLORSCALE, "reversescale": diff,
            "hovertemplate": "%{customdata[0]} (row %{y}) → %{customdata[1]} (column %{x}): " + verb
                             + " %{z:.3f}<extra></extra>",
            "colorbar": {"title": {"text": verb}, "thickness": 12}}
    if diff:
        heat["zmid"] = 0
    if w.size <= 144:  # small maps: the numbers in the cells too
        heat.update(texttemplate="%{z:.2f}", textfont={"size": 10})
    return Figure(data=[heat], layout=layout(
        title, x_title, y_title, height=square_side(*w.shape),
        xaxis=ticks(k_lab, side="bottom", tickangle=-45 if w.shape[1] > 8 else 0),
        yaxis=ticks(q_lab, autorange="reversed"), **fixed_width(w.shape[1])))


def grid_heatmap(values, row_labels, col_labels, title, x_title, y_title, zmin=None, zmax=None,
                 fmt=".2f", colorbar_title="", signed=False):
    """A generic labelled matrix (e.g. entropy per layer x head) with values on hover. signed:
    changes around 0 (red below, blue above, white at 0)."""
    v = np.round(np.asarray(values, dtype=float), 4)
    rows, cols = [label(r) for r in row_labels], [label(c) for c in col_labels]
    heat = {"type": "heatmap", "z": v.tolist(), "x": list(range(v.shape[1])), "y": list(range(v.shape[0])),
            "zmin": zmin, "zmax": zmax, "zmid": 0 if signed else None,
            "colorscale": DIVERGING if signed else SEQUENTIAL, "texttemplate": "%{z:" + fmt + "}",
            "customdata": [[[r, c] for c in cols] for r in rows],
            "hovertemplate": "%{customdata[0]}, %{customdata[1]}: %{z:" + fmt + "}<extra></extra>",
            "colorbar": {"title": {"text": colorbar_title}, "thickness": 12}}
    return Figure(data=[{k: x for k, x in heat.items() if x is not None}],
                  layout=layout(title, x_title, y_title, height=square_side(*v.shape), xaxis=ticks(cols),
                                yaxis=ticks(rows, autorange="reversed"), **fixed_width(v.shape[1])))


def line_chart(x, series, title, x_title, y_title, log_x=False, log_y=False, dash=None, height=360):
    """series: {name: y values}; dash: names drawn dashed (references)."""
    lines = [{"type": "scatter", "x": list(x), "y": [float(v) for v in y], "mode": "lines+markers",
              "name": label(name), "line": {"dash": "dash" if dash and name in dash else "solid"}}
             for name, y in series.items()]
    axis = lambda log: {"type": "log" if log else "linear", "showgrid": True, "gridcolor": GRID}  # noqa: E731
    return Figure(data=lines, layout=layout(title, x_title, y_title, height=height, xaxis=axis(log_x),
                                            yaxis=axis(log_y), legend={"orientation": "h", "y": -0.25}))


def bar_chart(categories, values, title, x_title, y_title, height=340, y_range=None):
    bars = {"type": "bar", "x": [label(c) for c in categories], "y": [float(v) for v in values],
            "marker": {"color": "#4c78a8"}, "text": [f"{v:.3f}" for v in values], "textposition": "outside",
            "cliponaxis": False}
    return Figure(data=[bars], layout=layout(title, x_title, y_title, height=height,
                                             yaxis={"range": y_range} if y_range else None))


def points(x, y, name):
    """A trace of markers, to mark chosen values on a line chart."""
    return {"type": "scatter", "x": list(x), "y": list(y), "mode": "markers", "name": label(name),
            "marker": {"size": 12, "symbol": "diamond", "color": "black"}}
