"""Score the translator with sacreBLEU and write the figures into metrics.json and the model card.

    python -m training.evaluate_translator --split test_2016_flickr --data-dir ../shared/data/multi30k

Reports cased BLEU (13a tokenizer, sacreBLEU's default), lowercased BLEU and chrF, for the asked
split and for val (the split every choice was made on). Detokenized output against raw references.

Also BLEU as the published Multi30k baselines measured it (e.g. fairseq's transformer_tiny, 41.0 on
test_2016): hypotheses and references Moses-normalized and Moses-tokenized (sacremoses, German,
no aggressive dash splitting, no escaping), lowercased, then counted on those tokens as they are,
as multi-bleu.perl counts (sacreBLEU with tokenize="none"; force=True because the text is
tokenized on purpose).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import sacrebleu
import torch
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from training.cards import write_translator_card
from training.common import read_json, write_json
from training.multi30k import SPLITS, load_split
from zoo.decoding import LENGTH_PENALTY
from zoo.translator import TransformerTranslator


def moses_lowercased(lines, lang="de"):
    """The anchor's preprocessing: Moses punctuation normalization and tokenization, lowercased."""
    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tok.tokenize(norm.normalize(line), escape=False, return_str=True).lower() for line in lines]


def score(hyps, refs):
    bleu = sacrebleu.BLEU()
    cased = bleu.corpus_score(hyps, [refs])
    tokenized = sacrebleu.BLEU(tokenize="none", force=True).corpus_score(moses_lowercased(hyps),
                                                                         [moses_lowercased(refs)])
    return {"bleu": round(cased.score, 2),
            "bleu_lc": round(sacrebleu.BLEU(lowercase=True).corpus_score(hyps, [refs]).score, 2),
            "chrf": round(sacrebleu.CHRF().corpus_score(hyps, [refs]).score, 2),
            "bleu_lc_moses_tokenized": round(tokenized.score, 2),
            "signature": str(bleu.get_signature())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="test_2016_flickr", choices=SPLITS)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--model-dir", default="zoo/checkpoints/translator-en-de")
    p.add_argument("--beam-size", type=int, default=5)
    p.add_argument("--length-penalty", type=float, default=LENGTH_PENALTY)
    p.add_argument("--sweep", default="", help="comma-separated length penalties to compare on val first; "
                   "the best one is then used (e.g. 0.3,0.6,1.0,1.5,2.0,3.0)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--no-write", action="store_true", help="print only; leave metrics.json and the card alone")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = TransformerTranslator.from_pretrained(args.model_dir)

    splits = functools.cache(lambda split: load_split(split, args.data_dir))  # each split read once

    def translate(split, length_penalty):
        """The split's sources and references, the hypotheses and the seconds translating took."""
        en, de = splits(split)
        t0 = time.time()
        hyps = model.translate(en, beam_size=args.beam_size, length_penalty=length_penalty)
        return en, de, hyps, round(time.time() - t0, 1)

    sweep, val_runs = {}, {}
    if args.sweep:
        for lp in (float(x) for x in args.sweep.split(",")):
            _, de, hyps, _ = val_runs[lp] = translate("val", lp)
            sweep[lp] = score(hyps, de)["bleu_lc"]
            print(f"val, length penalty {lp}: lowercased BLEU {sweep[lp]:.2f}", flush=True)
        args.length_penalty = max(sweep, key=sweep.get)
    results, examples = {}, []
    for split in dict.fromkeys(["val", args.split]):
        # val at the chosen length penalty was already translated by the sweep: reuse it.
        reuse = split == "val" and args.length_penalty in val_runs
        en, de, hyps, seconds = val_runs[args.length_penalty] if reuse else translate(split, args.length_penalty)
        r = score(hyps, de)
        r["seconds"] = seconds
        r["sentences"] = len(en)
        results[split] = r
        print(f"{split}: BLEU {r['bleu']:.2f} (cased), {r['bleu_lc']:.2f} (lowercased), chrF {r['chrf']:.2f}, "
              f"{r['bleu_lc_moses_tokenized']:.2f} (lowercased, Moses-tokenized, as the anchor measured); "
              f"{len(en)} sentences in {r['seconds']} s", flush=True)
        if split == "val":
            examples = [{"en": en[i], "hyp": hyps[i], "ref": de[i]} for i in (10, 25, 150) if i < len(en)]
    if not args.no_write:
        folder = Path(args.model_dir)
        metrics = read_json(folder / "metrics.json")
        metrics["evaluation"] = {
            "command": "python -m training.evaluate_translator " + " ".join(sys.argv[1:] if argv is None else argv),
            "beam_size": args.beam_size, "length_penalty": args.length_penalty,
            "length_penalty_sweep_val_bleu_lc": {str(k): v for k, v in sweep.items()},
            "sacrebleu_version": sacrebleu.__version__, "signature": results[args.split]["signature"],
            "splits": {k: {kk: vv for kk, vv in v.items() if kk != "signature"} for k, v in results.items()},
            "examples": examples,
        }
        write_json(folder / "metrics.json", metrics)
        write_translator_card(folder)
        print(f"wrote {folder / 'metrics.json'} and the model card")


if __name__ == "__main__":
    main()
