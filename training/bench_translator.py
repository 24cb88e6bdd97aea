"""Translator latency on this machine: beam 5 with the key/value cache vs recomputing the prefix.

    python -m training.bench_translator [--repeats 15] [--write]

The two decoders run interleaved on the same 12-word sentence, so machine noise hits both alike;
medians are reported. With --write the figures go
into the translator's metrics.json ("latency") and model card.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from training.cards import write_translator_card
from training.common import read_json, timed, write_json
from zoo import checkpoint_dir, load

SENTENCE_12 = "A young man in a red shirt rides a bicycle down the street."


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
    assert len(SENTENCE_12.split()) == 12
    src = model.batch_source([SENTENCE_12])
    # Both paths must agree before their speed means anything.
    assert model.beam_search(src, args.beam_size, use_cache=True) == model.beam_search(src, args.beam_size,
                                                                                        use_cache=False)
    for _ in range(3):  # warm-up
        model.translate([SENTENCE_12], beam_size=args.beam_size)
    cached, uncached, end_to_end = [], [], []
    for _ in range(args.repeats):
        cached.append(timed(lambda: model.beam_search(src, args.beam_size, use_cache=True)))
        uncached.append(timed(lambda: model.beam_search(src, args.beam_size, use_cache=False)))
        end_to_end.append(timed(lambda: model.translate([SENTENCE_12], beam_size=args.beam_size)))
    med = {k: statistics.median(v) * 1000 for k, v in
           {"cached": cached, "uncached": uncached, "translate": end_to_end}.items()}
    speedup = med["uncached"] / med["cached"]
    print(f"sentence ({len(SENTENCE_12.split())} words, {src.size(1)} source tokens): {SENTENCE_12!r}")
    print(f"translation: {model.translate([SENTENCE_12], beam_size=args.beam_size)[0]!r}")
    print(f"beam {args.beam_size}, {torch.get_num_threads()} threads, median of {args.repeats}:")
    print(f"  translate() end to end (tokenize + beam search with cache + detokenize): {med['translate']:.1f} ms")
    print(f"  beam search with KV cache:     {med['cached']:.1f} ms")
    print(f"  beam search recomputing prefix: {med['uncached']:.1f} ms  -> cache speed-up {speedup:.2f}x")
    checks = {"median_latency<=300ms": med["translate"] <= 300, "cache_speedup>=2x": speedup >= 2}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    if args.write:
        folder = checkpoint_dir("translator-en-de")
        metrics = read_json(folder / "metrics.json")
        metrics["latency"] = {"command": "python -m training.bench_translator --write", "sentence": SENTENCE_12,
                              "beam_size": args.beam_size, "threads": torch.get_num_threads(),
                              "repeats": args.repeats, "median_ms_translate": round(med["translate"], 1),
                              "median_ms_beam_cached": round(med["cached"], 1),
                              "median_ms_beam_uncached": round(med["uncached"], 1),
                              "cache_speedup": round(speedup, 2), "checks": checks}
        write_json(folder / "metrics.json", metrics)
        write_translator_card(folder)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
