"""Which of the translator's heads matter, over the whole val split (zoo.heads).

    python -m training.head_importance --data-dir ../shared/data/multi30k

1. Each head alone switched off: the change in val BLEU (lowercased sacreBLEU, beam 5, the
   evaluation's length penalty).
2. Michel et al.'s gradient score of each head on val's references (teacher-forced).
3. Pruning curves: heads switched off in order of importance, least important first, by each
   measure, with val BLEU every --every heads.

Writes "head_importance" (one row per head: kind, layer, head, delta BLEU, gradient score; the
curves; a verdict against Voita et al.) into the translator's metrics.json and card.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

import zoo
from training.cards import store, write_translator_card
from training.common import read_json
from training.evaluate_translator import score
from training.multi30k import load_split
from zoo import heads

FOLDER = Path(zoo.__file__).parent / "checkpoints" / "translator-en-de"


def reference_batches(model, en, de, size=32):
    """(src, tgt_in, tgt_out) batches of val with its references, right-padded."""
    for start in range(0, len(en), size):
        src = model.batch_source(en[start:start + size])
        outs = [model.encode_text(t, role="reference") + [model.eos_id] for t in de[start:start + size]]
        tgt_in, tgt_out = model.teacher_batch(outs)
        yield src, tgt_in, tgt_out


def pruning_curve(bleu_without, order, every):
    """[{pruned, bleu}]: val BLEU with the first k heads of `order` off, k = 0, every, 2 every, ..."""
    points = sorted({*range(0, len(order) + 1, every), len(order)})
    return [{"pruned": k, "bleu": bleu_without(order[:k])} for k in points]


def kind_ranks(order):
    """Mean position (0 = pruned first) of each kind's heads in a pruning order."""
    ranks = {}
    for i, (kind, _, _) in enumerate(order):
        ranks.setdefault(heads.KIND_NAMES[kind], []).append(i)
    return {k: round(float(np.mean(v)), 1) for k, v in ranks.items()}


def verdict(rows, ranks, threshold=0.5):
    """Voita et al.: most encoder heads can go at a small cost; cross-attention heads go last."""
    enc = [r for r in rows if r["kind"] == "encoder self"]
    cheap = sum(r["delta_bleu"] > -threshold for r in enc)
    last = {order: max(r, key=r.get) for order, r in ranks.items()}
    cross_last = all(k == "cross" for k in last.values())
    return (f"{cheap} of {len(enc)} encoder self-attention heads cost less than {threshold} BLEU each when switched "
            f"off alone ({'most' if cheap > len(enc) / 2 else 'not most'}, as Voita et al. found most). Pruned last "
            "on average: " + ", ".join(f"{k} by {order}" for order, k in last.items())
            + (": agrees that cross-attention heads are the last to go." if cross_last
               else ": does not agree that cross-attention heads are the last to go."))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--sentences", type=int, default=0, help="the first N val sentences only (0: all)")
    p.add_argument("--every", type=int, default=4, help="a pruning curve point every N heads")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    t0 = time.time()
    model = zoo.load("translator-en-de")
    evaluation = read_json(FOLDER / "metrics.json")["evaluation"]
    beam, lp = evaluation["beam_size"], evaluation["length_penalty"]
    en, de = load_split("val", args.data_dir)
    if args.sentences:
        en, de = en[: args.sentences], de[: args.sentences]

    def bleu_without(off):
        mask = heads.mask_without(model, off) if off else None
        return score(model.translate(en, beam_size=beam, length_penalty=lp, head_mask=mask), de)["bleu_lc"]

    base = bleu_without([])
    print(f"val BLEU with every head: {base}", flush=True)
    everyone = heads.every_head(model)
    shape = heads.grid_shape(model)
    delta = {kind: torch.zeros(s) for kind, s in shape.items()}
    for i, (kind, layer, head) in enumerate(everyone):
        delta[kind][layer, head] = bleu_without([(kind, layer, head)]) - base
        print(f"{i + 1}/{len(everyone)} {kind} L{layer + 1}H{head + 1}: {delta[kind][layer, head]:+.2f}", flush=True)
    gradient = heads.gradient_importance(model, reference_batches(model, en, de))
    rows = [{"kind": r["kind"], "layer": r["layer"], "head": r["head"], "delta_bleu": round(r["delta"], 2),
             "gradient": round(r["gradient"], 4)} for r in heads.rows_of({"delta": delta, "gradient": gradient})]
    # least important first: the largest BLEU change (removing it helps or costs least), the smallest gradient
    orders = {"delta BLEU": sorted(everyone, key=lambda h: -float(delta[h[0]][h[1], h[2]])),
              "gradient": sorted(everyone, key=lambda h: float(gradient[h[0]][h[1], h[2]]))}
    curves = {}
    for name, order in orders.items():
        curves[name] = pruning_curve(bleu_without, order, args.every)
        print(f"pruning by {name}: " + ", ".join(f"{c['pruned']}: {c['bleu']}" for c in curves[name]), flush=True)
    ranks = {name: kind_ranks(order) for name, order in orders.items()}
    record = {"command": "python -m training.head_importance", "split": "val", "sentences": len(en),
              "beam_size": beam, "length_penalty": lp, "measure": "lowercased sacreBLEU", "base_bleu": base,
              "rows": rows, "pruning": curves, "mean_prune_position": ranks, "verdict": verdict(rows, ranks),
              "seconds": round(time.time() - t0, 1)}
    print(record["verdict"], f"({record['seconds']} s)", flush=True)
    if not args.no_write:
        store(FOLDER, "head_importance", record, write_translator_card)


if __name__ == "__main__":
    main()
