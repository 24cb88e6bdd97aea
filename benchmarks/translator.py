"""Translator latency on this machine, and what the key/value cache saves.

    python -m benchmarks.translator [--repeats 15] [--write]

Latency: translate() of a 12-word sentence at beam 5, end to end (target: a median <= 150 ms at
the app's thread count). Cache: beam search with the key/value cache and without it (each step
reruns the decoder over the whole prefix and recomputes every key and value, as a decoder without
a cache does), interleaved so that machine noise hits both alike, on that sentence, on a 34-word one
and on a batch of 64; medians and the speed-up are reported as measured. The model is measured as
zoo.load returns it, with the app's thread count (one per request on 2 cores) and with PyTorch's
default (all cores). With --write the figures go into the translator's metrics.json ("latency")
and model card.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from training.cards import write_translator_card
from training.common import read_json, timed, write_json
from zoo import checkpoint_dir, load
from zoo.decoding import beam_search

SENTENCE_12 = "A man in a red shirt rides a bicycle down the street."
SENTENCE_34 = ("A young man wearing a red shirt and blue jeans rides his old bicycle down a busy city street past a "
               "group of people who are waiting at the bus stop in the rain.")
BATCH = ["Two dogs play in the snow.", "A woman in a red coat reads a book on a bench.",
         "Children are playing soccer in a park.", "A group of people stand outside a building.",
         "A man is cooking food in a restaurant kitchen.", "A little girl jumps into a swimming pool.",
         "Three men are working on a roof.", "A brown dog runs along the beach with a stick in its mouth."] * 8
TARGET_MS = 150


def cache_vs_recompute(model, texts, beam, repeats):
    """Median ms of beam search with and without the cache, interleaved, and the cache's speed-up."""
    src = model.batch_source(texts)
    # Both must agree before their speed means anything.
    assert beam_search(model, src, beam, use_cache=True) == beam_search(model, src, beam, use_cache=False)
    times = {True: [], False: []}
    for _ in range(repeats):
        for use_cache in (True, False):
            times[use_cache].append(timed(lambda use_cache=use_cache: beam_search(model, src, beam,
                                                                                  use_cache=use_cache)))
    cached, uncached = (statistics.median(times[c]) * 1000 for c in (True, False))
    return {"median_ms_cached": round(cached, 1), "median_ms_no_cache": round(uncached, 1),
            "speedup": round(uncached / cached, 2)}


def measure(model, beam, repeats):
    """Latency of translate() on the 12-word sentence and the cache's speed-up on each workload."""
    for _ in range(3):  # warm-up
        model.translate([SENTENCE_12], beam_size=beam)
    latency = statistics.median(timed(lambda: model.translate([SENTENCE_12], beam_size=beam))
                                for _ in range(repeats)) * 1000
    workloads = {"12-word sentence": ([SENTENCE_12], repeats), "34-word sentence": ([SENTENCE_34], 5),
                 "batch of 64 sentences": (BATCH, 2)}
    cache = {name: cache_vs_recompute(model, texts, beam, reps) for name, (texts, reps) in workloads.items()}
    return {"threads": torch.get_num_threads(), "median_ms_translate": round(latency, 1), "cache_vs_recompute": cache}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--beam-size", type=int, default=5)
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    model = load("translator-en-de")
    assert len(SENTENCE_12.split()) == 12 and len(SENTENCE_34.split()) == 34
    # The app's setting (app.py: two requests at a time, the cores split between them; 1 thread on
    # a 2-core machine), then PyTorch's default (every core for one request).
    cores = os.cpu_count() or 2
    app_threads = max(1, cores // 2)
    runs = []
    for threads in sorted({app_threads, torch.get_num_threads()}):
        torch.set_num_threads(threads)
        runs.append(measure(model, args.beam_size, args.repeats))
    print(f"beam {args.beam_size}; {model.translate([SENTENCE_12], beam_size=args.beam_size)[0]!r}")
    for run in runs:
        print(f"{run['threads']} thread(s): translate() of the 12-word sentence end to end, median of "
              f"{args.repeats}: {run['median_ms_translate']:.1f} ms")
        for name, r in run["cache_vs_recompute"].items():
            print(f"  {name}: KV cache {r['median_ms_cached']} ms; no cache {r['median_ms_no_cache']} ms -> "
                  f"{r['speedup']}x")
    app_run = next(r for r in runs if r["threads"] == app_threads)
    checks = {f"median_latency<={TARGET_MS}ms ({app_threads} thread(s), the app's)":
              app_run["median_ms_translate"] <= TARGET_MS}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    if args.write:
        folder = checkpoint_dir("translator-en-de")
        metrics = read_json(folder / "metrics.json")
        metrics["latency"] = {"command": "python -m benchmarks.translator --write", "sentence": SENTENCE_12,
                              "beam_size": args.beam_size, "repeats": args.repeats, "cores": cores,
                              "app_threads": app_threads, "runs": runs, "checks": checks}
        write_json(folder / "metrics.json", metrics)
        write_translator_card(folder)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
