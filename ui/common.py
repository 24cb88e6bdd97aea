"""What every tab shares: the zoo models (loaded once per process) and user-facing errors."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import unicodedata

import gradio as gr

import zoo
from zoo.basics import whole_number  # noqa: F401 - the one whole-number check, shared by the tabs

log = logging.getLogger("attention_lab")
# A visitor's stored results (a translation to redraw from, an analysis) are freed this long after
# they were last updated, so that a public server's memory does not fill with abandoned sessions.
STATE_SECONDS = 30 * 60
# Under every per-head statistics table: what its columns mean, in one line.
STATS_EXPLAINED = ("*entropy*: how spread a query's attention is, in nats (0: all on one key; ln T: even over T keys) "
                   "· *self*, *previous*, *next*, *first token*: the share of attention on the token itself, the one "
                   "before, the one after, and the first one · means over queries, 3 significant digits.")
_lock = threading.Lock()
_models = {}


def model(name):
    """The zoo model `name`, loaded on first use and shared by every request afterwards.

    Sharing is safe because inference never changes a model: weights are read-only, attention
    maps are returned rather than stored, and ablations (issue: head ablation) are per call."""
    if name not in _models:
        with _lock:
            if name not in _models:
                _models[name] = zoo.load(name)
    return _models[name]


def preload(names):
    """Load what exists now, so the first request doesn't pay for it. Returns {name: error}."""
    problems = {}
    for name in names:
        try:
            model(name)
        except Exception as e:  # noqa: BLE001 - one broken checkpoint must not take the other tabs down
            problems[name] = str(e)
            log.warning("model %s not loaded: %s", name, e)
    return problems


def user_errors(fn):
    """Turn a callback's ValueError (a user mistake, worded for the user) into gr.Error, and any
    other failure into a gr.Error that says what failed, logging the traceback server-side, so the
    user never sees a raw traceback or a bare "Error". A generator callback (one that streams
    updates) stays a generator, its failures worded the same way."""

    def worded(e):
        if isinstance(e, gr.Error):
            return e
        if isinstance(e, (ValueError, FileNotFoundError)):
            return gr.Error(as_text(str(e)), print_exception=False)
        log.exception("callback %s failed", fn.__name__)
        return gr.Error(f"{fn.__name__} failed unexpectedly ({type(e).__name__}). Please try another input; the "
                        "problem has been logged.", print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def streaming(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - the last line of defence for a public app
                raise worded(e) from None

        return streaming

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the last line of defence for a public app
            raise worded(e) from None

    return wrapper


def on(triggers, fn, inputs=None, outputs=None, **kwargs):
    """Every event of the app is wired here, with preprocess=False: Gradio's own checks of an input
    (a radio's choices, a slider's range) would refuse a bad value with a message that quotes it,
    and the browser renders that message as HTML. The callbacks check every value themselves and
    answer with worded, escaped errors (user_errors), so the values reach them as sent."""
    return gr.on(triggers, fn, inputs, outputs, preprocess=False, **kwargs)


def once(fn, keep=lambda result: True):
    """fn(), computed on the first call and then served from memory to every caller; a result that
    keep() rejects, or a call that raises, is not remembered. For what is the same for every
    visitor, like a tab's default view."""
    lock, kept = threading.Lock(), []

    def cached():
        with lock:
            if kept:
                return kept[0]
            result = fn()
            if keep(result):
                kept.append(result)
            return result

    return cached


def fill_when_opened(part):
    """Wire a tab that is filled the first time a visitor opens it, not at page load: the default
    inputs' result is computed once per process, then served to every visitor from memory. A hidden
    marker in the page records that the tab is filled (a shared link fills it too), so opening it
    again changes nothing. Returns the marker."""
    fn, inputs, outputs = part["render"]
    defaults = [c.value for c in inputs]  # a tab's inputs hold their defaults until it is first opened
    default_view = once(lambda: fn(*defaults), part.get("keep", lambda result: True))
    marker = gr.Textbox("", visible="hidden", elem_id=f"{part['tab'].id}-filled")

    def first_open(filled):
        if filled:
            return [gr.skip()] * (len(outputs) + 1)
        return [*default_view(), "1"]

    on(part["tab"].select, first_open, [marker], [*outputs, marker], api_visibility="private")
    return marker


def check_text(text, what, max_chars):
    """Common text checks: a string, not blank, not absurdly long, valid Unicode."""
    if not isinstance(text, str):
        raise ValueError(f"The {what} must be text.")
    if not any(unicodedata.category(c)[0] in "LNPS" for c in text):  # only spaces, controls, zero-widths
        raise ValueError(f"The {what} is empty. Type something first.")
    if len(text) > max_chars:
        raise ValueError(f"The {what} is {len(text):,} characters long; at most {max_chars:,} are accepted.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not a character any tokenizer can read
        raise ValueError(f"The {what} contains an invalid character (an unpaired UTF-16 surrogate).") from None
    return text.strip()


def choose(value, choices, what):
    """value if it is one of choices, else a ValueError listing them (API callers can send anything)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{what} must be one of: {', '.join(choices)}; got {quote(value)}.")
    return value


# Look-alikes for HTML's special characters: a message that quotes input keeps its meaning for the
# reader, and neither the browser (which renders toasts as HTML) nor an API client that shows it in
# a page of its own can turn it into markup.
LOOKALIKES = str.maketrans({"<": "‹", ">": "›", "&": "＆"})


def as_text(message):
    """A message that is safe wherever it is shown: HTML's special characters as look-alikes."""
    return message.translate(LOOKALIKES)


def quote(text, limit=30):
    """A short, printable excerpt of user input for an error message."""
    text = as_text("".join(c if c.isprintable() else "�" for c in str(text)))
    return repr(text if len(text) <= limit else text[:limit] + "…")


def significant(x, digits=3):
    """x rounded to `digits` significant digits (still a number: tables sort it as one)."""
    return x if x is None or isinstance(x, (int, str)) or x == 0 else float(f"{x:.{digits}g}")


def table_rows(stats):
    """zoo.stats.head_table rows as table rows, numbers at 3 significant digits."""
    return [[significant(v) for v in row.values()] for row in stats]


def head_names(n_layer, n_head, prefix=""):
    """['L1H1', 'L1H2', ...]: how heads are named in selectors and ablation lists."""
    return [f"{prefix}L{layer + 1}H{head + 1}" for layer in range(n_layer) for head in range(n_head)]


def head_mask(selected, n_layer, n_head, prefix=""):
    """Names of heads to switch off -> (n_layer, n_head) float mask (1 keep, 0 off), or None if
    nothing is switched off. Unknown names are refused with the accepted ones listed."""
    import torch

    if not selected:
        return None
    if isinstance(selected, str) or not isinstance(selected, (list, tuple)):
        raise ValueError("Heads to switch off must be a list of names like L1H2.")
    names = head_names(n_layer, n_head, prefix)
    mask = torch.ones(n_layer, n_head)
    for name in selected:
        if name not in names:
            raise ValueError(f"Unknown head {quote(name)}; choose from {', '.join(names)}.")
        i = names.index(name)
        mask[i // n_head, i % n_head] = 0
    return mask


_snapshots = {}
_snapshot_lock = threading.Lock()  # apart from _lock: loading snapshots never holds up a model's first load


def snapshots(name):
    """A model's training snapshots (zoo.snapshots), loaded once per process."""
    if name not in _snapshots:
        with _snapshot_lock:
            if name not in _snapshots:
                _snapshots[name] = zoo.snapshots(name)
    return _snapshots[name]


def select_head_map(maps, layer, head):
    """maps (n_layer, n_head, T_q, T_k); layer '1'..; head '1'.. or 'average' -> ((T_q, T_k) map, its name)."""
    layer = choose(layer, [str(i + 1) for i in range(maps.shape[0])], "Layer")
    head = choose(head, [str(i + 1) for i in range(maps.shape[1])] + ["average"], "Head")
    if head == "average":
        return maps[int(layer) - 1].mean(0), f"layer {layer}, average of {maps.shape[1]} heads"
    return maps[int(layer) - 1, int(head) - 1], f"layer {layer}, head {head}"
