"""Seed article's recipe vs ours, side by side in one run, for both sorters.

    python -m training.bench_sorter [--repeats 2] [--seed 0] [--write]

Both recipes get the same model (101,258 parameters), the same 1,500 x 128 fresh sequences and
the same evaluation set (5,000 sequences, seed 2024). Runs alternate seed/ours so that a noisy,
shared machine slows both alike; wall times are medians over --repeats. With --write the figures
go into each sorter's metrics.json ("benchmark") and model card.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from training.cards import write_sorter_card
from training.common import read_json, write_json
from training.train_sorter import evaluate, train
from zoo import CHECKPOINTS
from zoo.sorter import eval_set, sorting_ceiling_without_positions


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    p.add_argument("--write", action="store_true", help="store the figures in the zoo's metrics and cards")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    x, y = eval_set()
    ceiling = sorting_ceiling_without_positions()
    results = {}
    for use_pe in (True, False):
        name = "sorter-pe" if use_pe else "sorter-nope"
        for rep in range(args.repeats):
            for recipe in ("seed", "ours"):
                model, rec = train(use_pe, 1500, 128, recipe, seed=args.seed, progress=False)
                if (name, recipe) not in results:  # same seed, same weights every repeat: score once
                    results[(name, recipe)] = {"seconds": [], **evaluate(model, x, y)}
                results[(name, recipe)]["seconds"].append(rec["seconds"])
                print(f"{name:12s} {recipe:5s} run {rep + 1}: {rec['seconds']:.1f} s", flush=True)

    print(f"\n{'model':12s} {'recipe':6s} {'per-position':>12s} {'whole-seq':>10s} {'median s':>9s}")
    for (name, recipe), r in results.items():
        print(f"{name:12s} {recipe:6s} {r['per_position_accuracy']:12.4f} {r['sequence_accuracy']:10.4f} "
              f"{statistics.median(r['seconds']):9.1f}")
    pe_seed, pe_ours = results[("sorter-pe", "seed")], results[("sorter-pe", "ours")]
    nope_ours = results[("sorter-nope", "ours")]
    time_ratio = statistics.median(pe_ours["seconds"]) / statistics.median(pe_seed["seconds"])
    checks = {
        "pe_sequence_accuracy>=0.998": pe_ours["sequence_accuracy"] >= 0.998,
        "pe_wall_time<=seed": time_ratio <= 1.0,
        "nope_within_0.015_of_ceiling": abs(nope_ours["per_position_accuracy"] - ceiling) <= 0.015,
        "nope_sequence_accuracy<=0.005": nope_ours["sequence_accuracy"] <= 0.005,
    }
    print(f"\nceiling without positions: {ceiling:.4f}; PE wall-time ratio ours/seed: {time_ratio:.3f}")
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")

    if args.write:
        for name in ("sorter-pe", "sorter-nope"):
            folder = CHECKPOINTS / name
            metrics = read_json(folder / "metrics.json")
            metrics["benchmark"] = {
                "command": "python -m training.bench_sorter --write",
                "repeats": args.repeats, "ceiling_per_position_accuracy": round(ceiling, 5),
                "wall_time_ratio_ours_over_seed_pe": round(time_ratio, 3),
                **{recipe: {"per_position_accuracy": results[(name, recipe)]["per_position_accuracy"],
                            "sequence_accuracy": results[(name, recipe)]["sequence_accuracy"],
                            "median_seconds": round(statistics.median(results[(name, recipe)]["seconds"]), 2)}
                   for recipe in ("seed", "ours")},
                "checks": checks,
            }
            write_json(folder / "metrics.json", metrics)
            write_sorter_card(folder)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
