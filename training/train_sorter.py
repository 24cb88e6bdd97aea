"""Train the two digit sorters (with and without positional encoding).

    python -m training.train_sorter --variant both --out zoo/checkpoints

Each step draws a fresh batch of random 8-digit sequences; the target at position i is the i-th
smallest digit. The recipe is the playground's (zoo.playground.fit_steps, the one training loop):
1,500 steps x 128 sequences, AdamW with a short linear warmup to a peak lr of 5e-3 (5x the seed
article's constant 1e-3), cosine decay to zero, and gradient clipping at norm 1, which is what lets
the high peak lr work (without it: ~0.99 whole-sequence accuracy).

Evaluation uses 5,000 fresh sequences drawn with a different seed. Alongside the final weights,
snapshots at a few steps are saved (safetensors) so the app can replay how attention emerges.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from training.common import pick_device, write_json
from zoo.playground import BATCH, WARMUP, Design, fit_steps
from zoo.sorter import EVAL_SEED, DigitSorter, accuracy, eval_set, sorting_ceiling_without_positions

SNAPSHOT_STEPS = (0, 50, 100, 200, 400, 800, 1500)
RECIPE = {"optimizer": "adamw", "warmup": WARMUP, "schedule": "cosine", "grad_clip": 1.0}


def copy_state(model):
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def train(use_pos_encoding, steps=1500, batch_size=BATCH, lr=5e-3, seed=0, device="cpu", snapshot_steps=(),
          log_every=25, progress=True):
    """Train one sorter. Returns (model, record); record has the loss curve, time and snapshots
    ({step: state_dict}) taken *before* the update of that step (step 0 = initialisation)."""
    torch.manual_seed(seed)
    model = DigitSorter(use_pos_encoding=use_pos_encoding).to(device)
    design = Design(positions="sinusoidal" if use_pos_encoding else "none", steps=steps, seed=seed, lr=lr)
    snapshots = {0: copy_state(model)} if 0 in snapshot_steps else {}
    curve, t0 = [], time.time()
    updates = fit_steps(model, design, torch.Generator().manual_seed(seed), batch_size)
    bar = tqdm(updates, total=steps, desc=f"sorter-{'pe' if use_pos_encoding else 'nope'}", disable=not progress,
               mininterval=1)
    for step, loss in bar:
        if step + 1 in snapshot_steps:
            snapshots[step + 1] = copy_state(model)
        if step % log_every == 0 or step == steps - 1:
            curve.append([step, round(loss.item(), 4)])
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
    seconds = time.time() - t0
    return model.eval(), {"seconds": seconds, "loss_curve": curve, "final_loss": curve[-1][1],
                          "snapshots": snapshots, "lr": lr, **RECIPE}


def evaluate(model, x, y):
    pos, seq, per_slot = accuracy(model, x, y)
    return {"per_position_accuracy": round(pos, 5), "sequence_accuracy": round(seq, 5),
            "per_slot_accuracy": [round(a, 4) for a in per_slot], "eval_sequences": len(x), "eval_seed": EVAL_SEED}


def save(model, record, out_dir, name, args_used):
    """Weights + config (save_pretrained), metrics.json, snapshots/, model card."""
    from training.cards import write_sorter_card

    folder = Path(out_dir) / name
    model.cpu().save_pretrained(folder)
    x, y = eval_set()
    metrics = {"name": name, "parameters": model.num_parameters(), **args_used,
               "seconds": round(record["seconds"], 2), "final_loss": record["final_loss"],
               **evaluate(model, x, y), "loss_curve": record["loss_curve"]}
    if not model.use_pos_encoding:
        metrics["ceiling_per_position_accuracy"] = round(sorting_ceiling_without_positions(), 5)
    snap_dir = folder / "snapshots"
    snap_dir.mkdir(exist_ok=True)
    for old in snap_dir.glob("*.safetensors"):
        old.unlink()
    metrics["snapshots"] = []
    probe = DigitSorter(use_pos_encoding=model.use_pos_encoding).eval()
    for step, state in sorted(record["snapshots"].items()):
        file = f"step-{step:05d}.safetensors"
        save_file(state, str(snap_dir / file))
        probe.load_state_dict(state, strict=True)
        pos, seq, _ = accuracy(probe, x, y)
        metrics["snapshots"].append({"step": step, "file": f"snapshots/{file}",
                                     "per_position_accuracy": round(pos, 5), "sequence_accuracy": round(seq, 5)})
    write_json(folder / "metrics.json", metrics)
    write_sorter_card(folder)
    return metrics


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=["pe", "nope", "both"], default="both")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=5e-3, help="peak learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--out", default="zoo/checkpoints")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    variants = {"pe": [True], "nope": [False], "both": [True, False]}[args.variant]
    snaps = tuple(s for s in SNAPSHOT_STEPS if s <= args.steps) + (args.steps,)
    for use_pe in variants:
        name = "sorter-pe" if use_pe else "sorter-nope"
        model, record = train(use_pe, args.steps, args.batch_size, args.lr, args.seed, device, snapshot_steps=snaps)
        used = {"steps": args.steps, "batch_size": args.batch_size, "seed": args.seed, "recipe": "zoo.playground",
                "lr": record["lr"], "warmup": record["warmup"], "schedule": record["schedule"],
                "optimizer": record["optimizer"], "grad_clip": record["grad_clip"], "device": str(device)}
        m = save(model, record, args.out, name, used)
        print(f"{name}: per-position {m['per_position_accuracy']:.4f}, whole-sequence {m['sequence_accuracy']:.4f}, "
              f"final loss {m['final_loss']:.4f}, {m['seconds']:.1f} s -> {Path(args.out) / name}")


if __name__ == "__main__":
    main()
