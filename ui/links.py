"""Shareable links: the tab and its inputs travel in the URL's query string.

`?tab=sorter&digits=4+4+1+9+1+4+0+9&model=sorter-nope&layer=2&head=3` reopens the app on that tab
with those inputs, rendered. Anyone can write a link, so no value in it reaches a component
unchecked: each is held against the rule of the component it fills (its choices, its range and
step, its length cap) and, where the tab gives one, against the tab's own check (the sorter's
digits must be 8 digits). A value that fails keeps the input's default, and one notice names each
refused parameter, says what it accepts and quotes the value as text.

The rules come from the components themselves, so a parameter added to a tab is checked without a
line here; a kind of component without a rule is refused when the tab is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

import gradio as gr

from ui.common import as_text, on, quote

MAX_TEXT = 2000  # characters, for a text box without its own cap
FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


@dataclass(frozen=True)
class Param:
    """One query parameter of a tab's link: its name, the input it fills, and optionally the tab's
    own check of the value (raises ValueError with a worded message; returns the value to use)."""

    name: str
    component: gr.components.Component
    check: Callable[[Any], Any] | None = None


def choice_values(component):
    return [value for _, value in component.choices]


def many(component):
    """Whether the component holds a list of choices (checkbox group, multi-select dropdown)."""
    return isinstance(component, gr.CheckboxGroup) or (isinstance(component, gr.Dropdown) and component.multiselect)


def listed(values, most=8):
    """'a, b, c' or, for long lists, 'a, b, c, …, z (36 in all)'."""
    names = [str(v) for v in values]
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join(names[:3]) + f", …, {names[-1]} ({len(names)} in all)"


def number_rule(component):
    """(lowest, highest, step or None) of a slider or number box; step 1 for a whole-number box."""
    if isinstance(component, gr.Slider):
        return component.minimum, component.maximum, component.step
    step = 1 if component.precision == 0 else None
    return component.minimum, component.maximum, step


def accepted(component):
    """What a link may give for this component, in words."""
    if isinstance(component, gr.Checkbox):
        return "1 or 0 (or true/false, yes/no, on/off)"
    if many(component):
        return "a comma-separated list of: " + listed(choice_values(component))
    if isinstance(component, (gr.Radio, gr.Dropdown)):
        return "one of: " + listed(choice_values(component))
    if isinstance(component, (gr.Slider, gr.Number)):
        lo, hi, step = number_rule(component)
        if step == 1 and float(lo).is_integer():
            return f"a whole number from {lo:g} to {hi:g}"
        return f"a number from {lo:g} to {hi:g}" + (f" in steps of {step:g}" if step else "")
    if isinstance(component, gr.Textbox):
        return f"text of at most {component.max_length or MAX_TEXT:,} characters"
    raise TypeError(f"links have no rule for a {type(component).__name__}; add one to ui/links.py")


def parse(component, raw):
    """The value the component should hold for the link's text `raw`; ValueError if it may not."""
    refused = ValueError(f"must be {accepted(component)}; the link gave {quote(raw)}")
    if isinstance(component, gr.Checkbox):
        if raw.strip().lower() not in FLAGS:
            raise refused
        return FLAGS[raw.strip().lower()]
    if many(component):
        items = [item.strip() for item in raw.split(",") if item.strip()]
        if any(item not in choice_values(component) for item in items) or len(set(items)) < len(items):
            raise refused
        return items
    if isinstance(component, (gr.Radio, gr.Dropdown)):
        if raw not in choice_values(component) and not (isinstance(component, gr.Dropdown)
                                                         and component.allow_custom_value):
            raise refused
        return raw
    if isinstance(component, (gr.Slider, gr.Number)):
        return parse_number(raw, *number_rule(component), refused)
    if len(raw) > (component.max_length or MAX_TEXT):
        raise refused
    return raw


def parse_number(raw, lo, hi, step, refused):
    try:
        x = float(raw)
    except ValueError:
        raise refused from None
    if not (math.isfinite(x) and (lo is None or x >= lo) and (hi is None or x <= hi)):
        raise refused
    steps = (x - (lo or 0)) / step if step else 0
    if abs(steps - round(steps)) > 1e-9:
        raise refused
    return int(x) if x.is_integer() else x


def read(param, raw):
    """The checked value of one parameter, or ValueError saying what the parameter accepts."""
    value = parse(param.component, raw)
    return param.check(value) if param.check else value


def restore(query: Mapping[str, str], tabs: Mapping[str, list[Param]]):
    """(tab to open or None, {component: value} for the parameters that passed, notice or "").

    Only the linked tab's own parameters are read; a link without `tab` changes nothing."""
    tab = query.get("tab")
    if tab is None:
        return None, {}, ""
    if tab not in tabs:
        return None, {}, notice([f"tab: must be one of: {', '.join(tabs)}; the link gave {quote(tab)}"])
    values, problems = {}, []
    for param in tabs[tab]:
        if param.name in query:
            try:
                values[param.component] = read(param, query[param.name])
            except ValueError as e:
                problems.append(f"{param.name}: {e}")
    return tab, values, notice(problems)


def notice(problems):
    """One message for every refused parameter, safe as text in the toast that shows it (toasts
    render HTML; quoted values already stand in look-alike characters)."""
    if not problems:
        return ""
    lines = "\n".join(f"• {p}" for p in problems)
    return as_text(f"This link had settings the app does not accept; their defaults are shown instead.\n{lines}")


def encode(component, value):
    if many(component):
        return ",".join(value or [])
    if isinstance(component, gr.Checkbox):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def link_query(tab, params, *values):
    """'?tab=...&name=value...' for the given tab, its parameters and their current values."""
    query = {"tab": tab}
    query.update({p.name: encode(p.component, v) for p, v in zip(params, values, strict=True)
                  if v not in (None, "", [])})
    return "?" + urlencode(query)


# Runs in the browser: turn the query string from link_query into a full address.
TO_URL_JS = "(q) => q && q.startsWith('?') ? window.location.origin + window.location.pathname + q : q"


def share_panel(tab, params, export_fn, export_inputs, export_api, what="this view"):
    """The tab's closed "Export and link" box: downloads of the view (JSON, CSV, SVG, PNG) and the
    address that reopens it. Closed, it costs a visitor's browser nothing until opened."""
    with gr.Accordion(f"Export {what} · link to it", open=False, elem_id=f"{tab}-share"):
        with gr.Row():
            export = gr.Button(f"Export {what} (JSON, CSV, SVG, PNG)", elem_id=f"{tab}-export")
            files = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id=f"{tab}-files")
        on(export.click, export_fn, export_inputs, files, api_name=export_api)
        add_link_button(tab, params)


def add_link_button(tab, params):
    """A 'Link to this view' button + the box that shows the link, inside the current tab."""
    with gr.Row():
        btn = gr.Button("Link to this view", size="sm", elem_id=f"{tab}-link-button", scale=1)
        box = gr.Textbox(label="Shareable link", interactive=False, buttons=["copy"], elem_id=f"{tab}-link", scale=4)
    for p in params:
        accepted(p.component)  # a component without a link rule fails here, when the tab is built
    on(btn.click, lambda *v: link_query(tab, params, *v), [p.component for p in params], box,
       api_visibility="private").then(None, box, box, js=TO_URL_JS, api_visibility="private")


# Runs in the browser at page load: it hands the address's query to the server only when it names a
# tab, so opening the page without a shared link makes no request at all.
READ_LINK_JS = "() => new URLSearchParams(window.location.search).has('tab') ? window.location.search : ''"


def open_shared_links(demo, tabs, parts, markers):
    """Wire the page load: a shared link's parameters are checked, the linked tab is selected and
    filled with them, all in one request; any other page load asks the server for nothing.

    parts: {tab id: the tab's build() record}; markers: {tab id: the hidden box fill_when_opened
    made for a tab that fills itself when first opened}."""
    link = gr.Textbox("", visible="hidden", elem_id="link-query")
    on(demo.load, None, None, link, js=READ_LINK_JS)
    tab_params = {name: part["params"] for name, part in parts.items()}
    inputs = [p.component for params in tab_params.values() for p in params]
    views = [(name, part["render"], markers.get(name)) for name, part in parts.items() if part["render"]]
    outputs = [tabs, *inputs]
    for _, (_, _, view_outputs), marker in views:
        outputs += [*view_outputs] + ([marker] if marker else [])

    def open_link(query):
        tab, values, message = restore(dict(parse_qsl(query.lstrip("?"), keep_blank_values=True)), tab_params)
        out = [gr.Tabs(selected=tab) if tab else gr.skip()] + [values.get(c, gr.skip()) for c in inputs]
        for name, (fn, view_inputs, view_outputs), marker in views:
            view = None
            if name == tab:
                try:
                    view = list(fn(*[values.get(c, c.value) for c in view_inputs]))
                except gr.Error as e:  # the values passed every rule but the tab still refused them
                    message = "\n".join(filter(None, [message, e.message]))
            out += view or [gr.skip()] * len(view_outputs)
            if marker:
                out.append("1" if view else gr.skip())
        if message:
            gr.Warning(message, duration=20)
        return out

    on(link.change, open_link, [link], outputs, api_visibility="private")
