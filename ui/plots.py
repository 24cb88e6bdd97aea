"""Plotly figures shared by every tab: attention heatmaps, differences, lines and bars.

Heatmap conventions, the same everywhere: rows are queries, columns are keys; the colour scale is
fixed to 0-1 so two maps can be compared by eye; axes are numeric positions labelled with token
text, so repeated tokens never merge into one row; token text is HTML-escaped because plotly
renders labels as HTML (an unescaped `<s>` would vanish as a strike-through tag).
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

COLORSCALE = "Blues"
DIVERGING = "RdBu"
FONT = dict(family="Inter, Arial, sans-serif", size=12)


def label(token):
    """Token text safe for plotly labels and hovers; blank tokens stay visible."""
    token = str(token)
    if not token.strip():
        token = repr(token)
    return html.escape(token)


def _layout(title, x_title, y_title, n_rows, n_cols, height=None, xaxis=None, yaxis=None):
    """The layout every chart shares, as one dict: plotly validates each update separately, so one
    description is much cheaper than building a figure and updating it (figures are redrawn on every
    request)."""
    side = max(300, min(620, 40 * max(n_rows, n_cols) + 160))
    return dict(title=dict(text=label(title), x=0.5), font=FONT, margin=dict(l=70, r=20, t=60, b=70),
                height=height or side, plot_bgcolor="white", xaxis=dict(title=x_title, **(xaxis or {})),
                yaxis=dict(title=y_title, **(yaxis or {})))


def _ticks(labels, **extra):
    """Numeric positions labelled with token text: repeated tokens keep their own row/column."""
    return dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels, **extra)


def attention_heatmap(weights, query_tokens, key_tokens, title="Attention", diff=False,
                      x_title="key (attended to)", y_title="query (attending)"):
    """weights (T_q, T_k) -> heatmap. diff=True draws a difference map on a -1..1 scale."""
    w = np.asarray(weights, dtype=float)
    q_lab = [label(t) for t in query_tokens]
    k_lab = [label(t) for t in key_tokens]
    custom = np.array([[[q, k] for k in k_lab] for q in q_lab], dtype=object)
    verb = "change" if diff else "weight"
    cells = dict(text=np.round(w, 2), texttemplate="%{text:.2f}", textfont=dict(size=10)) if w.size <= 144 else {}
    heat = go.Heatmap(
        z=w, x=list(range(w.shape[1])), y=list(range(w.shape[0])), customdata=custom,
        zmin=-1 if diff else 0, zmax=1, colorscale=DIVERGING if diff else COLORSCALE,
        zmid=0 if diff else None, reversescale=diff,
        hovertemplate="%{customdata[0]} (row %{y}) → %{customdata[1]} (column %{x}): " + verb
                      + " %{z:.3f}<extra></extra>",
        colorbar=dict(title=verb, thickness=12), **cells)  # small maps: the numbers in the cells too
    return go.Figure(heat, _layout(title, x_title, y_title, *w.shape,
                                   xaxis=_ticks(k_lab, side="bottom", tickangle=-45 if w.shape[1] > 8 else 0),
                                   yaxis=_ticks(q_lab, autorange="reversed")))


def grid_heatmap(values, row_labels, col_labels, title, x_title, y_title, zmin=None, zmax=None,
                 fmt=".2f", colorbar_title=""):
    """A generic labelled matrix (e.g. entropy per layer x head) with values on hover."""
    v = np.asarray(values, dtype=float)
    heat = go.Heatmap(
        z=v, x=list(range(v.shape[1])), y=list(range(v.shape[0])), zmin=zmin, zmax=zmax,
        colorscale="Viridis", text=np.round(v, 3), texttemplate="%{z:" + fmt + "}",
        customdata=np.array([[[label(r), label(c)] for c in col_labels] for r in row_labels], dtype=object),
        hovertemplate="%{customdata[0]}, %{customdata[1]}: %{z:" + fmt + "}<extra></extra>",
        colorbar=dict(title=colorbar_title, thickness=12))
    return go.Figure(heat, _layout(title, x_title, y_title, *v.shape, xaxis=_ticks([label(c) for c in col_labels]),
                                   yaxis=_ticks([label(r) for r in row_labels], autorange="reversed")))


def line_chart(x, series, title, x_title, y_title, log_x=False, log_y=False, dash=None, height=360):
    """series: {name: y values}; dash: names drawn dashed (references)."""
    lines = [go.Scatter(x=list(x), y=list(y), mode="lines+markers", name=label(name),
                        line=dict(dash="dash" if dash and name in dash else "solid")) for name, y in series.items()]
    layout = _layout(title, x_title, y_title, 0, 0, height=height,
                     xaxis=dict(type="log" if log_x else "linear", showgrid=True, gridcolor="#eee"),
                     yaxis=dict(type="log" if log_y else "linear", showgrid=True, gridcolor="#eee"))
    return go.Figure(lines, dict(layout, legend=dict(orientation="h", y=-0.25)))


def bar_chart(categories, values, title, x_title, y_title, height=340, y_range=None):
    bars = go.Bar(x=[label(c) for c in categories], y=list(values), marker_color="#4c78a8",
                  text=[f"{v:.3f}" for v in values], textposition="outside", cliponaxis=False)
    return go.Figure(bars, _layout(title, x_title, y_title, 0, 0, height=height,
                                   yaxis=dict(range=y_range) if y_range else None))
