"""Translator latency on this machine: beam 5 with the key/value cache vs recomputing the prefix.

    python -m training.bench_translator [--repeats 15] [--write]

Latency: translate() of a 12-word sentence, end to end. Cache: the two decoders run interleaved
(so machine noise hits both alike) on that sentence, on a 34-word one and on a batch of 64; medians
are reported. Each decoding step reads every weight once whichever way it runs, and for a short
single sentence that read, not the prefix, is most of a step: the cache pays off with length and
batch size. With --write the figures go
into the translator's metrics.json ("latency") and model card.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from training.cards import write_translator_card
from training.common import read_json, timed, write_json
from zoo import checkpoint_dir, load

SENTENCE_12 = "A man in a red shirt rides a bicycle down the street."
SENTENCE_34 = ("A young man wearing a red shirt and blue jeans rides his old bicycle down a busy city street past a "
               "group of people who are waiting at the bus stop in the rain.")
BATCH = ["Two dogs play in the snow.", "A woman in a red coat reads a book on a bench.",
         "Children are playing soccer in a park.", "A group of people stand outside a building.",
         "A man is cooking food in a restaurant kitchen.", "A little girl jumps into a swimming pool.",
         "Three men are working on a roof.", "A brown dog runs along the beach with a stick in its mouth."] * 8


def cache_vs_recompute(model, texts, beam, repeats):
    """Median ms of beam search with the KV cache and recomputing the prefix, interleaved."""
    src = model.batch_source(texts)
    # Both paths must agree before their speed means anything.
    assert model.beam_search(src, beam, use_cache=True) == model.beam_search(src, beam, use_cache=False)
    cached, uncached = [], []
    for _ in range(repeats):
        cached.append(timed(lambda: model.beam_search(src, beam, use_cache=True)))
        uncached.append(timed(lambda: model.beam_search(src, beam, use_cache=False)))
    c, u = statistics.median(cached) * 1000, statistics.median(uncached) * 1000
    return {"median_ms_cached": round(c, 1), "median_ms_uncached": round(u, 1), "speedup": round(u / c, 2)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--beam-size", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load("translator-en-de")
    assert len(SENTENCE_12.split()) == 12 and len(SENTENCE_34.split()) == 34
    for _ in range(3):  # warm-up
        model.translate([SENTENCE_12], beam_size=args.beam_size)
    latency = statistics.median(timed(lambda: model.translate([SENTENCE_12], beam_size=args.beam_size))
                                for _ in range(args.repeats)) * 1000
    workloads = {"12-word sentence": ([SENTENCE_12], args.repeats), "34-word sentence": ([SENTENCE_34], 5),
                 "batch of 64 sentences": (BATCH, 2)}
    cache = {name: cache_vs_recompute(model, texts, args.beam_size, reps) for name, (texts, reps) in workloads.items()}
    print(f"beam {args.beam_size}, {torch.get_num_threads()} threads")
    print(f"translate() of {SENTENCE_12!r} end to end, median of {args.repeats}: {latency:.1f} ms")
    print(f"  -> {model.translate([SENTENCE_12], beam_size=args.beam_size)[0]!r}")
    for name, r in cache.items():
        print(f"{name}: KV cache {r['median_ms_cached']} ms, recomputing the prefix {r['median_ms_uncached']} ms "
              f"-> {r['speedup']}x")
    checks = {"median_latency<=300ms": latency <= 300,
              **{f"cache_speedup>=2x ({name})": r["speedup"] >= 2 for name, r in cache.items()}}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    if args.write:
        folder = checkpoint_dir("translator-en-de")
        metrics = read_json(folder / "metrics.json")
        metrics["latency"] = {"command": "python -m training.bench_translator --write", "sentence": SENTENCE_12,
                              "beam_size": args.beam_size, "threads": torch.get_num_threads(),
                              "repeats": args.repeats, "median_ms_translate": round(latency, 1),
                              "cache_vs_recompute": cache, "checks": checks}
        write_json(folder / "metrics.json", metrics)
        write_translator_card(folder)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
