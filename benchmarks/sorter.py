"""Sorter training: ours against the seed article's own model and loop, side by side in one run.

    python -m benchmarks.sorter [--repeats 6] [--threads 0] [--write]

The article's sorter and loop come from ../shared/reference/seed_sorter.py (--reference), rebuilt
as the article states them: Adam at lr 1e-3, 1,500 steps of 128 fresh sequences. Ours is
`training.train_sorter.train` with the shipped recipe. Both run in this process with the same
thread count, interleaved (A B B A ...) so that a noisy, shared machine slows both alike, and each
repeat uses seed 0, 1, 2 in turn; only the training loop is timed. Reported: the median time of
each and their ratio with its spread (ratios of the repeats' pairs), and whole-sequence accuracy
on 5,000 fresh sequences per seed (target: ours >= 0.998 on seeds 0-2). With --write the figures
go into both sorters' metrics.json ("benchmark") and model cards.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

import torch

import zoo
from training.cards import write_sorter_card
from training.common import read_json, write_json
from training.train_sorter import evaluate, train
from zoo.sorter import eval_set, sorting_ceiling_without_positions

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "seed_sorter.py"
SEEDS = (0, 1, 2)


def load_reference(path):
    """The article's sorter as a module (its run(pos, steps, bs, seed) trains and scores one model)."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"{path} is missing: pass --reference pointing at the article's seed_sorter.py")
    spec = importlib.util.spec_from_file_location("seed_sorter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_pair(reference, seed, ours_first, x, y):
    """One repeat: the article's run and ours, in the given order. Returns their loop seconds and
    whole-sequence accuracies."""
    results = {}
    for who in (("ours", "article") if ours_first else ("article", "ours")):
        if who == "article":
            r = reference.run(True, seed=seed)
            results[who] = (r["train_s"], r["whole_seq"])
        else:
            model, record = train(True, seed=seed, progress=False)
            results[who] = (record["seconds"], evaluate(model, x, y)["sequence_accuracy"])
    return results


def measure(reference, repeats):
    x, y = eval_set()
    times = {"ours": [], "article": []}
    accuracy = {"ours": {}, "article": {}}
    for rep in range(repeats):
        seed = SEEDS[rep % len(SEEDS)]
        pair = run_pair(reference, seed, ours_first=rep % 2 == 1, x=x, y=y)
        for who, (seconds, acc) in pair.items():
            times[who].append(seconds)
            accuracy[who][seed] = acc
        print(f"repeat {rep + 1}, seed {seed}: article {pair['article'][0]:.1f} s, ours {pair['ours'][0]:.1f} s",
              flush=True)
    ratios = [o / a for o, a in zip(times["ours"], times["article"], strict=True)]
    return {"threads": torch.get_num_threads(), "repeats": repeats,
            "median_seconds": {who: round(statistics.median(t), 2) for who, t in times.items()},
            "seconds": {who: [round(s, 2) for s in t] for who, t in times.items()},
            "ratio_of_medians": round(statistics.median(times["ours"]) / statistics.median(times["article"]), 3),
            "pair_ratios": {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                            "max": round(max(ratios), 3)},
            "whole_sequence_accuracy": accuracy}


def nope_check():
    """The no-PE sorter with the shipped recipe, seed 0: per-position accuracy against the ceiling."""
    model, _ = train(False, seed=0, progress=False)
    return evaluate(model, *eval_set())


def write(result, nope):
    for name in ("sorter-pe", "sorter-nope"):
        folder = zoo.checkpoint_dir(name)
        metrics = read_json(folder / "metrics.json")
        metrics["benchmark"] = {"command": "python -m benchmarks.sorter --write", **result,
                                "nope_seed0": {k: nope[k] for k in ("per_position_accuracy", "sequence_accuracy")}}
        write_json(folder / "metrics.json", metrics)
        write_sorter_card(folder)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=6, help="interleaved pairs (at least 5)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    p.add_argument("--reference", default=str(REFERENCE))
    p.add_argument("--write", action="store_true", help="store the figures in the zoo's metrics and cards")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(load_reference(args.reference), max(5, args.repeats))
    nope = nope_check()
    ceiling = sorting_ceiling_without_positions()
    med, spread = result["median_seconds"], result["pair_ratios"]
    print(f"\n{result['threads']} thread(s), {result['repeats']} interleaved repeats, training loop only:")
    print(f"  article {med['article']:.1f} s, ours {med['ours']:.1f} s: ratio of medians {result['ratio_of_medians']}"
          f" (pairs: median {spread['median']}, {spread['min']}-{spread['max']})")
    print(f"  whole-sequence accuracy by seed: ours {result['whole_sequence_accuracy']['ours']}, "
          f"article {result['whole_sequence_accuracy']['article']}")
    print(f"  no-PE, ours, seed 0: per position {nope['per_position_accuracy']:.4f} (ceiling {ceiling:.4f})")
    checks = {"ours at least as fast (ratio of medians <= 1)": result["ratio_of_medians"] <= 1.0,
              "ours >= 0.998 whole-sequence on seeds 0-2": all(
                  a >= 0.998 for a in result["whole_sequence_accuracy"]["ours"].values()),
              "no-PE within 0.015 of the ceiling": abs(nope["per_position_accuracy"] - ceiling) <= 0.015}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    result["checks"] = checks
    if args.write:
        write(result, nope)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
