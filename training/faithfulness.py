"""Is attention an explanation of these models? The tabs' one-input test, over a corpus.

    python -m training.faithfulness --data-dir ../shared/data/multi30k

For each sorter, 1,000 fresh sequences with one seeded output position each; for the translator,
500 val sentences with one seeded output token each (of its own beam-5 translation, teacher-forced).
Every prediction is explained as in the app (zoo.attribution): per layer, the mean of the heads'
attention row and the rollout through that layer (the translator: a decoder layer's
cross-attention, and the encoder's rollout read through it), then gradient x input, integrated
gradients and leave-one-out on the input embeddings. Each method is scored against leave-one-out
(Spearman; undefined where leave-one-out is constant, and those are counted, not averaged) and by
its deletion curve (AOPC, beside random orders). The means go under "faithfulness" in each model's
metrics.json and card.

PhoBERT: the sentences of --phobert-sentences (default training/data/phobert_sentences.vi, one
Vietnamese sentence per line; one seeded word of each is masked), when its weights are at hand: the
same for its fill-mask prediction, into zoo/findings/faithfulness-phobert.json. Where the weights
cannot be had it is skipped, saying so.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

import zoo
from training.cards import store, write_sorter_card, write_translator_card
from training.common import write_json
from training.multi30k import load_split
from zoo import attribution, decoding, phobert

CHECKPOINTS = Path(zoo.__file__).parent / "checkpoints"
FINDINGS = Path(zoo.__file__).parent / "findings"
PHOBERT_SENTENCES = Path(__file__).parent / "data" / "phobert_sentences.vi"
# Abnar and Zuidema (2020), Table 1: Spearman with blank-out at the last layer of their 6-layer
# subject-verb agreement model, the figures our last layer is compared with.
PUBLISHED = {"attention": 0.29, "rollout": 0.71, "flow": 0.70}


def split_label(label):
    """'attention, layer 2' -> (2, 'attention'); 'integrated gradients' -> ('input', ...)."""
    if ", layer " in label:
        method, layer = label.split(", layer ")
        return int(layer), method
    return "input", label


def tabulate(reports):
    """Mean Spearman (over the predictions where it is defined) and mean AOPC per layer and method."""
    rows = []
    for label in reports[0]["faithfulness"]:
        if label == "random":
            continue
        rhos = [r["faithfulness"][label]["spearman"] for r in reports]
        defined = [x for x in rhos if x is not None]
        layer, method = split_label(label)
        rows.append({"layer": layer, "method": method,
                     "spearman": round(float(np.mean(defined)), 3) if defined else None,
                     "aopc": round(float(np.mean([r["faithfulness"][label]["aopc"] for r in reports])), 3),
                     "undefined": len(rhos) - len(defined)})
    random_aopc = round(float(np.mean([r["faithfulness"]["random"]["aopc"] for r in reports])), 3)
    return rows, random_aopc


def verdict(rows):
    """Our last layer against Abnar and Zuidema's last-layer figures, in one sentence."""
    last = max(r["layer"] for r in rows if r["layer"] != "input")
    ours = {r["method"]: r["spearman"] for r in rows if r["layer"] == last}
    a, ro = ours.get("attention"), ours.get("rollout")
    if a is None or ro is None:
        return "Spearman undefined at the last layer; no comparison."
    agrees = ro > a
    gap = PUBLISHED["rollout"] - PUBLISHED["attention"]
    return (f"Last layer (layer {last}): raw attention {a:.2f}, rollout {ro:.2f}, against Abnar and Zuidema's "
            f"{PUBLISHED['attention']:.2f} and {PUBLISHED['rollout']:.2f} (flow {PUBLISHED['flow']:.2f}, not computed "
            f"here): {'agrees' if agrees else 'does not agree'} that rollout tracks the input's effect better "
            "than raw attention" + (f", by {ro - a:+.2f} against their +{gap:.2f}."
                                    if agrees else f" (rollout {ro - a:+.2f})."))


def summary(reports, command, seconds, what):
    rows, random_aopc = tabulate(reports)
    return {"command": command, "predictions": len(reports), "what": what, "ig_steps": attribution.IG_STEPS,
            "seconds": round(seconds, 1), "rows": rows, "random_aopc": random_aopc, "published": PUBLISHED,
            "verdict": verdict(rows)}


def sorter_reports(model, n, seed):
    g = torch.Generator().manual_seed(seed)
    digits = torch.randint(0, 10, (n, 8), generator=g)
    positions = torch.randint(0, 8, (n,), generator=g)
    reports = []
    for x, p in zip(digits.tolist(), positions.tolist(), strict=True):
        target, maps, _ = attribution.sorter_target(model, x, p)
        reports.append(attribution.explain(target, attribution.layer_rows(maps, p)))
    return reports


def translator_reports(model, sentences, seed, progress=print):
    rng = np.random.default_rng(seed)
    reports = []
    for start in range(0, len(sentences), 64):
        batch = sentences[start:start + 64]
        for text, hyp in zip(batch, decoding.beam_search(model, model.batch_source(batch), 5), strict=True):
            src_ids, out_ids = model.encode_text(text) + [model.eos_id], hyp + [model.eos_id]
            step = int(rng.integers(len(out_ids)))
            cross, composed = attribution.translator_maps(model, src_ids, out_ids)
            target = attribution.translator_target(model, src_ids, out_ids, step)
            reports.append(attribution.explain(target, attribution.layer_rows(cross, step, composed)))
        progress(f"translator: {len(reports)}/{len(sentences)} sentences")
    return reports


def masked(sentence, rng):
    """The sentence with one seeded word (pyvi's segmentation) replaced by <mask>, or None if it has
    fewer than two words."""
    words = phobert.segment_words(sentence).split()
    if len(words) < 2:
        return None
    words[int(rng.integers(len(words)))] = phobert.MASK
    return " ".join(words)


def phobert_reports(explorer, sentences, seed):
    rng = np.random.default_rng(seed)
    reports = []
    for text in filter(None, (masked(s, rng) for s in sentences)):
        fill = phobert.fill_mask(explorer, text, segment=False)
        reports.append(attribution.explain(fill.target, attribution.layer_rows(fill.attentions, fill.mask_index)))
    return reports


def write_model(name, record, write_card):
    store(CHECKPOINTS / name, "faithfulness", record, write_card)
    print(record["verdict"], flush=True)


def run_phobert(path, seed, command):
    explorer = phobert.explorer()
    try:
        explorer.load()
    except phobert.PhobertUnavailable as e:
        print(f"PhoBERT skipped: {e}")
        return
    sentences = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    t0 = time.time()
    record = summary(phobert_reports(explorer, sentences, seed), command, time.time() - t0,
                     "the top fill-mask prediction's log-probability, one seeded word masked per sentence")
    FINDINGS.mkdir(exist_ok=True)
    write_json(FINDINGS / "faithfulness-phobert.json", record)
    print(f"wrote {FINDINGS / 'faithfulness-phobert.json'}: {record['verdict']}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None, help="folder with Multi30k's <split>.{en,de}.gz")
    p.add_argument("--sequences", type=int, default=1000)
    p.add_argument("--sentences", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--phobert-sentences", default=str(PHOBERT_SENTENCES),
                   help="a text file, one Vietnamese sentence per line ('' to skip PhoBERT)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    command = "python -m training.faithfulness" + (f" --seed {args.seed}" if args.seed else "")
    torch.manual_seed(args.seed)
    for name in ("sorter-pe", "sorter-nope"):
        t0 = time.time()
        reports = sorter_reports(zoo.load(name), args.sequences, args.seed)
        record = summary(reports, command, time.time() - t0,
                         "the predicted digit's log-probability at one seeded output position per sequence")
        print(f"{name}: {len(reports)} sequences in {record['seconds']} s", flush=True)
        if not args.no_write:
            write_model(name, record, write_sorter_card)
    if "translator-en-de" in zoo.available():
        en = load_split("val", args.data_dir)[0]
        chosen = sorted(np.random.default_rng(args.seed).choice(len(en), args.sentences, replace=False).tolist())
        t0 = time.time()
        reports = translator_reports(zoo.load("translator-en-de"), [en[i] for i in chosen], args.seed)
        record = summary(reports, command, time.time() - t0,
                         "one seeded output token's log-probability per val sentence, teacher-forced on the "
                         "model's beam-5 translation")
        if not args.no_write:
            write_model("translator-en-de", record, write_translator_card)
    if args.phobert_sentences:
        run_phobert(args.phobert_sentences, args.seed, command)
    else:
        print("PhoBERT skipped: --phobert-sentences ''")


if __name__ == "__main__":
    main()
