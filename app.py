"""Attention Lab: see what every attention head of a Transformer does.

`demo` is built at import time, with the zoo models loaded once and shared by every request;
`python app.py` launches it (a Hugging Face Space runs exactly that, with GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT set, which become the defaults of --host and --port). `python app.py --help`.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import threading
import time

import gradio as gr
import torch

from ui import basics, compare, export, links, phobert, playground, plots, sorter, translator
from ui.common import fill_when_opened, preload

# The Space has 2 vCPUs. Each event runs at most CONCURRENCY requests at once (Gradio's limit is
# per event), and PyTorch gets one thread per request on such a machine: concurrent requests then
# spread over the cores instead of each spinning up threads that fight for the same two.
CONCURRENCY = max(1, int(os.environ.get("ATTENTION_LAB_CONCURRENCY", "2")))


def limit_malloc_arenas(n=2):
    """glibc gives busy threads malloc arenas of their own (up to 8 per core) and keeps what they
    free; a server with dozens of request threads then grows under load without holding more data.
    Two arenas are enough for two requests at a time. A no-op where libc is not glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, n)  # -8 = M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def trim_freed_memory(every_s=10.0):
    """glibc keeps memory the program has freed for reuse rather than returning it to the system: a
    burst of requests leaves the server holding it long after. A daemon thread calls glibc's
    malloc_trim(0) every few seconds, which hands free pages back. A no-op where libc is not glibc."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return

    def loop():
        while True:
            time.sleep(every_s)
            trim(0)

    threading.Thread(target=loop, name="malloc-trim", daemon=True).start()


def configure_process():
    """What the server process sets for itself, once, before it serves: malloc arenas and trimming,
    PyTorch's threads (the cores split between the requests that run at once) and logging."""
    limit_malloc_arenas()
    trim_freed_memory()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // CONCURRENCY))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("attention_lab").setLevel(logging.INFO)


CSS = """
.sorter-marks {display: flex; gap: 6px; flex-wrap: wrap; margin: 4px 0;}
.sorter-marks .digit {display: inline-flex; flex-direction: column; align-items: center; min-width: 2.2em;
  padding: 4px 6px; border-radius: 6px; font: 600 1.4em monospace;}
.sorter-marks .digit small {font: 0.55em sans-serif;}
.sorter-marks .ok {background: #d9f2dd; color: #14532d;}
.sorter-marks .bad {background: #fde2e1; color: #7f1d1d;}
#sorter-overview .js-plotly-plot {min-width: 640px;}
""" + plots.CSS

# Every callback turns its failures into worded, escaped gr.Error messages (ui.common.user_errors),
# which Gradio always shows. Its own errors are not shown: they can quote the caller's input as sent
# (a call missing an argument lists the ones it had), and the browser renders them as HTML.
SHOW_ERROR = False

MISSING = preload(["sorter-pe", "sorter-nope", "translator-en-de"])
if os.environ.get("ATTENTION_LAB_PRELOAD_PHOBERT", "1") != "0":
    phobert.preload_in_background()

# Gradio's copies of the files it serves (exports) are deleted once they are KEEP_SECONDS old,
# checked a few times in that span.
CACHE = (max(1, export.KEEP_SECONDS // 3), export.KEEP_SECONDS)
# Gradio keeps per-visitor state (~0.4 MB each here) for every session that made a request; at most
# this many are kept, the least recently used dropped first. A State's value also expires on its own
# (ui.common.STATE_SECONDS).
SESSIONS = 200
LAUNCH = {"css": CSS, "show_error": SHOW_ERROR, "state_session_capacity": SESSIONS}

with gr.Blocks(title="Attention Lab", delete_cache=CACHE) as demo:
    gr.Markdown("# Attention Lab\nType digits or sentences and look at what every attention head does — on "
                "small models trained in minutes, with numbers you can check.")
    with gr.Tabs() as tabs:
        parts = {"sorter": sorter.build(demo), "compare": compare.build(demo), "translator": translator.build(demo),
                 "phobert": phobert.build(demo), "playground": playground.build(demo), "basics": basics.build(demo)}
    # The first tab opens with its default view in place; every other tab fills itself when a visitor
    # first opens it, and a shared link fills the tab it names (ui.links): a page load does only the
    # visible tab's work.
    markers = {name: fill_when_opened(part) for name, part in parts.items()
               if part["render"] and not part.get("embedded")}
    links.open_shared_links(demo, tabs, parts, markers)
    tab_parts = {name: part for name, part in parts.items() if part["params"]}  # the linkable tabs

demo.queue(default_concurrency_limit=CONCURRENCY, max_size=64)


def main(argv=None):
    p = argparse.ArgumentParser(description="Run Attention Lab locally.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to listen on (0.0.0.0 for your network)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    p.add_argument("--share", action="store_true", help="also create a public gradio.live link (needs internet)")
    args = p.parse_args(argv)
    configure_process()
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, **LAUNCH)


if __name__ == "__main__":
    main()
