"""The app as users meet it: start-up time, and latency of /sort and /translate through the API.

    python -m benchmarks.latency [--requests 30] [--write]

Start-up is measured in fresh processes started the way a user would (`python app.py`), offline
(HF_HUB_OFFLINE=1, an empty Hub cache, no PHOBERT_PATH): from launching the process to the page
being served (median of --starts), and, inside it, the time to import app.py (Gradio, PyTorch, the
zoo models). Latencies are medians over --requests sequential calls with gradio_client. Targets:
start-up <= 5 s without PhoBERT, /sort <= 100 ms, /translate <= 250 ms; then the views computed
on request (attribution, contrast, heads), and all five attribution methods for one translator
token in process (<= 1 s; <= 3 s through the API). With --write the figures go
into README.md's "Reliability and speed" table (between its markers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.server import ROOT, free_port, start_app, stop, write_readme
from zoo.basics import median_seconds


def import_seconds():
    """Seconds to `import app` in a fresh interpreter (offline, PhoBERT not preloaded)."""
    code = "import time; t = time.perf_counter(); import app; print(time.perf_counter() - t)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ATTENTION_LAB_PRELOAD_PHOBERT": "0"}
    env.pop("PHOBERT_PATH", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def median_ms(fn, n):
    return median_seconds(fn, n) * 1000


def api_latencies(port, requests):
    """Median ms of /sort and /translate through gradio_client, and what /phobert says offline."""
    from gradio_client import Client

    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
    sort = lambda: client.predict("7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", 6, [], api_name="/sort")  # noqa: E731
    translate = lambda: client.predict("A man is riding a bicycle down the street.", 5, "", "cross-attention",  # noqa: E731
                                       "1", "average", [], api_name="/translate")
    for _ in range(3):  # warm-up
        sort(), translate()
    sort_ms, translate_ms = median_ms(sort, requests), median_ms(translate, requests)
    try:
        client.predict("Xin chào", True, 1, 1, None, "subword tokens", api_name="/phobert")
        phobert = "answered (weights present)"
    except Exception as e:  # noqa: BLE001 - the point is what the message says
        phobert = "explains itself" if "PHOBERT_PATH" in str(e) else f"unexpected: {e}"
    return sort_ms, translate_ms, phobert


SENTENCE = "A man is riding a bicycle down the street."


def attribution_in_process(repeats=5):
    """Median seconds for all five methods on one translator token (zoo only, one thread, as the
    app runs a request): the middle token of SENTENCE's own translation."""
    import torch

    import zoo
    from zoo import attribution, decoding

    torch.set_num_threads(1)
    net = zoo.load("translator-en-de")
    src_ids = net.encode_text(SENTENCE) + [net.eos_id]
    out_ids = decoding.beam_search(net, net.batch_source([SENTENCE]), 5)[0] + [net.eos_id]
    step = len(out_ids) // 2

    def once():
        cross, composed = attribution.translator_maps(net, src_ids, out_ids)
        rows = attribution.attention_rows(cross, step, 0, 0, composed[-1])
        attribution.explain(attribution.translator_target(net, src_ids, out_ids, step), rows)

    once()
    return median_seconds(once, repeats)


def on_request_views(port, repeats=5):
    """Median seconds of the views computed on request, through gradio_client."""
    from gradio_client import Client

    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
    calls = {"/translate_attribution, one token (target ≤ 3 s)": (SENTENCE, 4, "", "1", "1"),
             "/sort_attribution, one position": ("7 2 9 2 5 0 8 3", 3, "sorter-pe", "1", "1"),
             "/translate_contrast, one step": (SENTENCE, 1, "Frau", "1", "1"),
             "/translate_heads, every head": (SENTENCE,)}
    out = {}
    for name, args in calls.items():
        api = name.split(",")[0]
        client.predict(*args, api_name=api)
        out[name] = median_seconds(lambda a=args, n=api: client.predict(*a, api_name=n), repeats)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--starts", type=int, default=3, help="fresh start-ups to time (median)")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    imp = import_seconds()
    startups = []
    for _ in range(args.starts - 1):
        proc, seconds = start_app(free_port())
        startups.append(seconds)
        stop(proc)
    port = free_port()
    proc, seconds = start_app(port)
    startup = statistics.median(startups + [seconds])
    try:
        sort_ms, translate_ms, phobert = api_latencies(port, args.requests)
        views = on_request_views(port)
    finally:
        stop(proc)
    in_process = attribution_in_process()
    figures = {"`import app` (Gradio, PyTorch, zoo models)": f"{imp:.2f} s",
               f"start-up offline, process start to page served, median of {args.starts} (target ≤ 5 s)":
                   f"{startup:.2f} s",
               f"/sort median of {args.requests} (target ≤ 100 ms)": f"{sort_ms:.0f} ms",
               f"/translate median of {args.requests}, beam 5 (target ≤ 250 ms)": f"{translate_ms:.0f} ms",
               "/phobert offline without weights": phobert,
               "all five attribution methods, one translator token, in process at 1 thread (target ≤ 1 s)":
                   f"{in_process:.2f} s",
               **{f"{name}, median of 5": f"{sec:.2f} s" for name, sec in views.items()}}
    for k, v in figures.items():
        print(f"{k}: {v}")
    checks = {"startup<=5s": startup <= 5, "sort<=100ms": sort_ms <= 100, "translate<=250ms": translate_ms <= 250,
              "phobert explains itself": not phobert.startswith("unexpected"), "attribution<=1s": in_process <= 1,
              "translate_attribution<=3s": views["/translate_attribution, one token (target ≤ 3 s)"] <= 3}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    if args.write:
        write_readme("latency", figures)
    print(json.dumps({"import_s": imp, "startup_s": startup, "sort_ms": sort_ms, "translate_ms": translate_ms}))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
