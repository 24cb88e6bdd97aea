"""Calibrate the translator's out-of-domain warning and measure how well it separates.

    python -m training.ood --data-dir ../shared/data/multi30k

The score is the model's familiarity with a sentence (TransformerTranslator.familiarity: the mean
log-probability per token of its own beam-5 translation). Its distribution over val gives the
percentiles the tab places a sentence at; the tab warns below the --percentile-th. Measured here:
the AUROC of the score between val and the committed out-of-domain sentences
(training/data/out_of_domain.en, written for this), the share of those warned, and the rate of
false warnings on test_2016_flickr (in-domain, never used to choose anything). Written into the
translator's metrics.json ("ood") and card.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import zoo
from training.cards import store, write_translator_card
from training.multi30k import load_split

FOLDER = Path(zoo.__file__).parent / "checkpoints" / "translator-en-de"
SENTENCES = Path(__file__).parent / "data" / "out_of_domain.en"


def auroc(in_domain, out_of_domain):
    """P(an out-of-domain sentence scores lower than an in-domain one), ties counting half: the
    area under the ROC curve of warning on low familiarity."""
    a, b = np.asarray(in_domain)[:, None], np.asarray(out_of_domain)[None, :]
    return float((b < a).mean() + 0.5 * (b == a).mean())


def scores(model, texts, batch=64):
    out = []
    for start in range(0, len(texts), batch):
        out += model.familiarity(texts[start:start + batch])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--percentile", type=float, default=5.0, help="warn below this percentile of val")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    t0 = time.time()
    model = zoo.load("translator-en-de")
    ood_texts = [line.strip() for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line.strip()]
    splits = [load_split(split, args.data_dir)[0] for split in ("val", "test_2016_flickr")]
    val, test, ood = (scores(model, texts) for texts in (*splits, ood_texts))
    threshold = float(np.percentile(val, args.percentile))
    record = {"command": "python -m training.ood", "score": "mean log-probability per token of the model's own "
              "beam-5 translation, teacher-forced", "val_percentiles": [round(float(v), 4) for v in
                                                                       np.percentile(val, np.arange(101))],
              "warn_below_percentile": args.percentile, "threshold": round(threshold, 4),
              "ood_sentences": len(ood), "ood_file": str(SENTENCES.relative_to(SENTENCES.parents[2])),
              "auroc_val_vs_ood": round(auroc(val, ood), 3),
              "ood_warned": round(float(np.mean(np.asarray(ood) < threshold)), 3),
              "false_warnings_test_2016": round(float(np.mean(np.asarray(test) < threshold)), 3),
              "medians": {"val": round(float(np.median(val)), 3), "test_2016_flickr": round(float(np.median(test)), 3),
                          "out-of-domain": round(float(np.median(ood)), 3)},
              "examples": [{"en": t, "score": round(s, 3)} for t, s in zip(ood_texts[:4], ood[:4], strict=True)],
              "seconds": round(time.time() - t0, 1)}
    print({k: v for k, v in record.items() if k != "val_percentiles"}, flush=True)
    if not args.no_write:
        store(FOLDER, "ood", record, write_translator_card)


if __name__ == "__main__":
    main()
