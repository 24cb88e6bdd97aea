"""What PhobertExplorer.analyze costs on top of PhoBERT's own forward pass.

    python -m benchmarks.phobert [--repeats 30] [--threads 0] [--out figures.json]

A full-size phobert-base with random weights (built from ../shared/data's config, saved to a
temporary folder beside PhoBERT's real tokenizer files and loaded from there like a local copy)
analyses the article's sentence. In the same run, the same input ids go through a bare
`model(**inputs, output_attentions=True)`. The two alternate, so that a noisy, shared machine slows
both alike, and the medians are compared: the analysis overhead (segmentation, tokenisation,
statistics, word view) must stay within 50% of the bare pass. Loading is timed but not counted.
Exits 1 when the overhead is over the limit.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForMaskedLM

from training.common import timed, write_json
from zoo.phobert import PhobertExplorer, parameter_breakdown, segment_words

TOKENIZER_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "phobert-tokenizer"
SENTENCE = "Giảng viên giải thích rất dễ hiểu nhưng phòng học quá nóng"
MAX_OVERHEAD = 0.5


def build_local_copy(folder, source=TOKENIZER_DIR):
    """A PhoBERT folder: the real vocab.txt and bpe.codes, phobert-base's config, random weights."""
    for name in ("vocab.txt", "bpe.codes"):
        shutil.copy(source / name, folder)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(source / "config_vinai_phobert-base.json")
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=30, help="timed runs of each (after 3 warm-up runs)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    p.add_argument("--out", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not TOKENIZER_DIR.is_dir():
        raise SystemExit(f"{TOKENIZER_DIR} is missing: it holds PhoBERT's tokenizer files and config")

    with tempfile.TemporaryDirectory() as folder:  # kept until the end: the weights may be memory-mapped
        build_s = timed(lambda: build_local_copy(Path(folder)))
        ex = PhobertExplorer(folder)
        load_s = timed(ex.load)
        model = ex.model
        inputs = ex.tokenizer(segment_words(SENTENCE), return_tensors="pt")
        n_tokens = inputs["input_ids"].shape[1]

        def bare():
            with torch.inference_mode():
                model(**inputs, output_attentions=True)

        def analyze():
            ex.analyze(SENTENCE)

        for _ in range(3):  # warm-up: the first calls pay for page faults and allocator growth
            bare()
            analyze()
        times = {bare: [], analyze: []}
        for i in range(args.repeats):
            for fn in (bare, analyze) if i % 2 == 0 else (analyze, bare):
                times[fn].append(timed(fn))
    bare_ms, analyze_ms = (1000 * statistics.median(times[fn]) for fn in (bare, analyze))
    overhead = analyze_ms / bare_ms - 1

    breakdown = parameter_breakdown(model.roberta)
    print(f"phobert-base, random weights: built and saved in {build_s:.1f} s, loaded in {load_s:.1f} s (not counted)")
    print(f"total {breakdown['total'] / 1e6:.1f}M, embeddings {breakdown['embeddings'] / 1e6:.1f}M "
          f"({100 * breakdown['embeddings_share']:.0f}%), {breakdown['n_blocks']} blocks "
          f"{breakdown['blocks'] / 1e6:.1f}M; per block attention {breakdown['per_block_attention'] / 1e6:.2f}M, "
          f"feed-forward {breakdown['per_block_feed_forward'] / 1e6:.2f}M")
    print(f"\n{n_tokens} tokens, {torch.get_num_threads()} thread(s), median of {args.repeats} runs each:")
    print(f"  bare forward  {bare_ms:7.1f} ms")
    print(f"  analyze       {analyze_ms:7.1f} ms")
    ok = overhead <= MAX_OVERHEAD
    print(f"  overhead      {100 * overhead:+6.1f}%  (limit {100 * MAX_OVERHEAD:.0f}%): {'PASS' if ok else 'FAIL'}")

    if args.out:
        write_json(args.out, {
            "command": "python -m benchmarks.phobert", "sentence": SENTENCE, "tokens": n_tokens,
            "threads": torch.get_num_threads(), "repeats": args.repeats,
            "bare_forward_ms": round(bare_ms, 2), "analyze_ms": round(analyze_ms, 2),
            "overhead": round(overhead, 4), "max_overhead": MAX_OVERHEAD, "pass": ok,
            "load_seconds": round(load_s, 2), "parameter_breakdown": breakdown,
        })
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
