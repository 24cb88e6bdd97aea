"""Shareable links: the tab and its inputs travel in the URL's query string.

`?tab=sorter&digits=4+4+1+9+1+4+0+9&model=sorter-nope&layer=2&head=3` reopens the app on that tab
with those inputs, rendered. A parameter that is missing keeps the input's default; a bad value is
refused by the tab's own checks, with the same messages as typed input.
"""

from __future__ import annotations

from urllib.parse import urlencode

import gradio as gr

# For each tab, its query parameters in the order of the tab's `inputs` (see each build()), with
# their kind: text, number (sliders, numbers), list (multi-selects, comma-separated) or flag.
PARAMS = {
    "sorter": [("digits", "text"), ("model", "text"), ("layer", "text"), ("head", "text"), ("step", "number"),
               ("off", "list")],
    "compare": [("digits", "text"), ("layer", "text"), ("head", "text"), ("step", "number")],
    "translator": [("text", "text"), ("beam", "number"), ("ref", "text"), ("view", "text"), ("layer", "text"),
                   ("head", "text"), ("off", "list"), ("snapshot", "number")],
    "phobert": [("text", "text"), ("segment", "flag"), ("layer", "number"), ("head", "number"),
                ("token", "number"), ("view", "text")],
    "basics": [],
}
MAX_VALUE = 2000  # characters per parameter; longer ones are cut (the tab then refuses them)


def decode(kind, raw):
    raw = raw[:MAX_VALUE]
    if kind == "list":
        return [p.strip() for p in raw.split(",") if p.strip()]
    if kind == "flag":
        return raw.lower() not in ("0", "false", "no", "off")
    if kind == "number":
        try:
            number = float(raw)
        except ValueError:
            return raw  # the tab's check explains what is accepted
        return int(number) if number.is_integer() else number
    return raw


def encode(kind, value):
    if kind == "list":
        return ",".join(value or [])
    if kind == "flag":
        return "1" if value else "0"
    if kind == "number" and isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def link_query(tab, *values):
    """'?tab=...&name=value...' for the given tab and its current input values."""
    params = {"tab": tab}
    params.update({name: encode(kind, v) for (name, kind), v in zip(PARAMS[tab], values) if v not in (None, "")})
    return "?" + urlencode(params)


def restore(tabs_inputs, request: gr.Request):
    """On page load: the tab to select and, for every registered input, its value from the URL or
    gr.skip() (leave the default). tabs_inputs: [(tab, n_inputs)] in registration order."""
    query = dict(request.query_params) if request is not None else {}
    tab = query.get("tab")
    out = [gr.Tabs(selected=tab) if tab in PARAMS else gr.skip()]
    for name, n_inputs in tabs_inputs:
        for param, kind in PARAMS[name][:n_inputs]:
            out.append(decode(kind, query[param]) if tab == name and param in query else gr.skip())
    return out


# Runs in the browser: turn the query string from link_query into a full address.
TO_URL_JS = "(q) => q && q.startsWith('?') ? window.location.origin + window.location.pathname + q : q"


def add_link_button(tab, inputs):
    """A 'Link to this view' button + the box that shows the link, inside the current tab."""
    with gr.Row():
        btn = gr.Button("Link to this view", size="sm", elem_id=f"{tab}-link-button", scale=1)
        box = gr.Textbox(label="Shareable link", interactive=False, buttons=["copy"], elem_id=f"{tab}-link", scale=4)
    btn.click(lambda *v: link_query(tab, *v), inputs, box, api_visibility="private").then(
        None, box, box, js=TO_URL_JS, api_visibility="private")
