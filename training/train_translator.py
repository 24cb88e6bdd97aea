"""Train the English->German translator on Multi30k.

    python -m training.train_translator --data-dir ../shared/data/multi30k \
        --out zoo/checkpoints/translator-en-de

Recipe: joint byte-level BPE (8k) learnt on the training split; 3+3-layer pre-LN Transformer
(d_model 256, 4 heads, d_ff 1024, shared embeddings); batches of about --max-tokens padded
tokens; Adam (0.9, 0.98), linear warmup then cosine decay; label smoothing 0.1. After every epoch:
validation loss and greedy BLEU. At the end the last --average epoch checkpoints are averaged and
kept if that beats the best single epoch on validation BLEU. The weights after each of
--snapshot-epochs are also saved, in int8 (zoo.hub.save_int8), under snapshots/ for the app's
training-epoch slider. Deterministic for a given seed on a given machine and precision.
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import sacrebleu
import torch
import torch.nn.functional as F
from tqdm import tqdm

from training.cards import write_translator_card
from training.common import pick_device, pick_dtype, read_json, seed_everything, write_json
from training.multi30k import load_split
from training.subwords import SPECIALS, train_tokenizer
from zoo.hub import load_int8, save_int8
from zoo.translator import TransformerTranslator


def encode_pairs(tok, en, de, max_len):
    """Id lists (source + </s>, </s>-terminated target); pairs longer than max_len are dropped."""
    eos = SPECIALS.index("</s>")
    src = [e.ids + [eos] for e in tok.encode_batch(en)]
    tgt = [d.ids + [eos] for d in tok.encode_batch(de)]
    return [(s, t) for s, t in zip(src, tgt, strict=True) if len(s) <= max_len and len(t) <= max_len]


def make_batches(pairs, max_tokens, rng):
    """Token-count batching: sort by length (with a little noise so batches differ between
    epochs), cut into batches whose padded src+tgt size stays under max_tokens, shuffle them."""
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]) + rng.random(), len(pairs[i][0])))
    batches, cur, src_max, tgt_max = [], [], 0, 0
    for i in order:
        s, t = len(pairs[i][0]), len(pairs[i][1]) + 1  # the target is padded with <s> in front
        if cur and (max(src_max, s) + max(tgt_max, t)) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, src_max, tgt_max = [], 0, 0
        cur.append(i)
        src_max, tgt_max = max(src_max, s), max(tgt_max, t)
    batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(pairs, idx, pad, bos, device):
    src_len = max(len(pairs[i][0]) for i in idx)
    tgt_len = max(len(pairs[i][1]) for i in idx)
    src = torch.full((len(idx), src_len), pad, dtype=torch.long)
    tgt = torch.full((len(idx), tgt_len + 1), pad, dtype=torch.long)
    tgt[:, 0] = bos
    for row, i in enumerate(idx):
        s, t = pairs[i]
        src[row, : len(s)] = torch.tensor(s)
        tgt[row, 1: len(t) + 1] = torch.tensor(t)
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def lr_at(step, total, warmup, peak):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def validation_loss(model, pairs, batches, device, dtype):
    model.eval()
    total, count = 0.0, 0
    for idx in batches:
        src, tgt_in, tgt_out = collate(pairs, idx, model.pad_id, model.bos_id, device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(src, tgt_in)
        total += F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=model.pad_id,
                                 reduction="sum").item()
        count += (tgt_out != model.pad_id).sum().item()
    return total / count


def bleu(model, en, de, beam_size=1):
    """Corpus BLEU (sacreBLEU 13a, cased) and its lowercased twin."""
    model.eval()
    hyps = model.translate(en, beam_size=beam_size)
    return (sacrebleu.corpus_bleu(hyps, [de]).score,
            sacrebleu.corpus_bleu(hyps, [de], lowercase=True).score, hyps)


def average_state(states):
    return {k: sum(s[k].float() for s in states) / len(states) for k in states[0]}


def epoch_list(text):
    """'1,3' -> {1, 3}: the epochs to keep snapshots of."""
    try:
        epochs = {int(e) for e in text.split(",") if e.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated epoch numbers, got {text!r}") from None
    if any(e < 1 for e in epochs):
        raise argparse.ArgumentTypeError(f"epochs count from 1, got {text!r}")
    return epochs


def save_snapshots(model, snapshots, out, val_en, val_de):
    """Write {epoch: (history row, state)} as int8 files under out/snapshots/ (replacing any old
    ones) and score each file as stored: greedy val BLEU of the de-quantized weights, loaded into a
    copy of `model` (whose own weights stay as they are)."""
    folder = out / "snapshots"
    shutil.rmtree(folder, ignore_errors=True)
    rows, scratch = [], copy.deepcopy(model)
    for epoch, (row, state) in sorted(snapshots.items()):
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"epoch-{epoch:02d}.safetensors"
        save_int8(state, path)
        scratch.load_state_dict(load_int8(path), strict=True)
        rows.append({"epoch": epoch, "step": row["step"], "file": path.relative_to(out).as_posix(),
                     "val_loss": row["val_loss"], "val_bleu_greedy": row["val_bleu_greedy"],
                     "val_bleu_greedy_int8": round(bleu(scratch, val_en, val_de)[0], 2)})
        print(f"snapshot epoch {epoch}: {path} ({path.stat().st_size / 1e6:.1f} MB), val BLEU greedy "
              f"{row['val_bleu_greedy']} (float32) / {rows[-1]['val_bleu_greedy_int8']} (int8 as stored)", flush=True)
    return rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None, help="folder with Multi30k <split>.{en,de}.gz (downloaded if absent)")
    p.add_argument("--out", default="zoo/checkpoints/translator-en-de")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-layer", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--dropout", type=float, default=0.3)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=4096, help="padded src+tgt tokens per batch")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=600)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--average", type=int, default=10,
                   help="keep the last N epochs; the average of the last k of them (k chosen on val) may be kept")
    p.add_argument("--snapshot-epochs", type=epoch_list, default=None,
                   help="comma-separated epochs whose weights are kept (int8) for the app's slider; '' for none. "
                        "Default: 1,3, those within --epochs (two keep the whole zoo under 60 MB)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    p.add_argument("--limit-train", type=int, default=0, help="use only the first N training pairs (smoke runs)")
    p.add_argument("--limit-val", type=int, default=0, help="BLEU on only the first N validation pairs")
    args = p.parse_args(argv)
    if args.snapshot_epochs is None:
        args.snapshot_epochs = {e for e in (1, 3) if e <= args.epochs}
    elif any(e > args.epochs for e in args.snapshot_epochs):
        p.error(f"--snapshot-epochs {sorted(args.snapshot_epochs)} goes past --epochs {args.epochs}")
    args.command = "python -m training.train_translator " + " ".join(sys.argv[1:] if argv is None else argv)
    return args


def prepare_data(args):
    """The tokenizer learnt on the training split, and the training and validation data."""
    train_en, train_de = load_split("train", args.data_dir)
    val_en, val_de = load_split("val", args.data_dir)
    if args.limit_train:
        train_en, train_de = train_en[: args.limit_train], train_de[: args.limit_train]
    if args.limit_val:
        val_en, val_de = val_en[: args.limit_val], val_de[: args.limit_val]
    tok = train_tokenizer(train_en + train_de, args.vocab_size)
    return SimpleNamespace(tokenizer=tok, pairs=encode_pairs(tok, train_en, train_de, args.max_len),
                           val_pairs=encode_pairs(tok, val_en, val_de, args.max_len), val_en=val_en, val_de=val_de)


def train_epoch(model, opt, data, batches, step, total_steps, args, device, dtype):
    """One pass over the batches. Returns the step count after it, the mean training loss per
    target token and the tokens (source + target) it read."""
    model.train()
    tokens, loss_sum, loss_n = 0, 0.0, 0
    bar = tqdm(batches, desc=f"step {step}", mininterval=5, leave=False)
    for idx in bar:
        src, tgt_in, tgt_out = collate(data.pairs, idx, model.pad_id, model.bos_id, device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total_steps, args.warmup, args.lr)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=model.pad_id,
                               label_smoothing=args.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        n = (tgt_out != model.pad_id).sum().item()
        tokens += n + (src != model.pad_id).sum().item()
        loss_sum, loss_n = loss_sum + loss.item() * n, loss_n + n
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    return step, loss_sum / loss_n, tokens


def fit(model, data, args, device, dtype):
    """Train for args.epochs, validating after each. Returns the history, the last args.average
    epochs' weights, the best epoch by greedy val BLEU (bleu, epoch, weights) and the snapshots."""
    rng, t_start = random.Random(args.seed), time.time()
    total_steps = len(make_batches(data.pairs, args.max_tokens, random.Random(0))) * args.epochs
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    val_batches = make_batches(data.val_pairs, args.max_tokens, random.Random(0))
    history, kept, best, step, snapshots = [], [], None, 0, {}
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        step, train_loss, tokens = train_epoch(model, opt, data, make_batches(data.pairs, args.max_tokens, rng), step,
                                               total_steps, args, device, dtype)
        train_time = time.time() - t0
        v_bleu, v_bleu_lc, _ = bleu(model, data.val_en, data.val_de)
        row = {"epoch": epoch, "step": step, "train_loss": round(train_loss, 4),
               "val_loss": round(validation_loss(model, data.val_pairs, val_batches, device, dtype), 4),
               "val_bleu_greedy": round(v_bleu, 2), "val_bleu_lc_greedy": round(v_bleu_lc, 2),
               "epoch_seconds": round(train_time, 1), "tokens_per_second": round(tokens / train_time),
               "elapsed_seconds": round(time.time() - t_start)}
        history.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        kept = (kept + [state])[-args.average:]
        if best is None or v_bleu > best[0]:
            best = (v_bleu, epoch, state)
        if epoch in args.snapshot_epochs:
            snapshots[epoch] = (row, state)
    return history, kept, best, snapshots


def choose_weights(model, kept, best, data, last_epoch):
    """Checkpoint averaging: the mean of the last epochs' weights often beats any one of them.
    Score the average of the last k kept epochs for a few k, and the best single epoch, by greedy
    val BLEU (never test); load the winner. Returns its name and the table of val scores."""
    sweep, choice = {}, None
    for k in sorted({k for k in (2, 3, 5, 8, 10, len(kept)) if 2 <= k <= len(kept)}):
        model.load_state_dict(average_state(kept[-k:]))
        sweep[f"last {k}"] = round(bleu(model, data.val_en, data.val_de)[0], 2)
        print(f"average of last {k} epochs: val BLEU (greedy) {sweep[f'last {k}']:.2f}", flush=True)
        if choice is None or sweep[f"last {k}"] > sweep[choice]:
            choice = f"last {k}"
    sweep[f"epoch {best[1]}"] = round(best[0], 2)
    print(f"best single epoch {best[1]}: {best[0]:.2f}", flush=True)
    if choice is None or best[0] > sweep[choice]:
        model.load_state_dict(best[2])
        return f"epoch {best[1]}", sweep
    k = int(choice.split()[1])
    model.load_state_dict(average_state(kept[-k:]))
    return f"average of epochs {last_epoch - k + 1}-{last_epoch}", sweep


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    device = pick_device(args.device)
    dtype = pick_dtype(args.dtype, device)
    t_start = time.time()
    data = prepare_data(args)
    tok = data.tokenizer
    model = TransformerTranslator(vocab_size=tok.get_vocab_size(), d_model=args.d_model, n_head=args.n_head,
                                  n_enc_layer=args.n_layer, n_dec_layer=args.n_layer, d_ff=args.d_ff,
                                  dropout=args.dropout, max_len=args.max_len).attach_tokenizer(tok).to(device)
    print(f"{len(data.pairs)} training pairs, vocab {tok.get_vocab_size()}, {model.num_parameters():,} parameters, "
          f"{device} {str(dtype).removeprefix('torch.')}, {torch.get_num_threads()} threads", flush=True)
    history, kept, best, snapshots = fit(model, data, args, device, dtype)
    chosen, average_sweep = choose_weights(model, kept, best, data, args.epochs)
    model.to("cpu").save_pretrained(args.out)
    metrics = read_json(f"{args.out}/metrics.json")
    metrics["snapshots"] = save_snapshots(model, snapshots, Path(args.out), data.val_en, data.val_de)
    metrics["training"] = {
        "command": args.command, "parameters": model.num_parameters(), "train_pairs": len(data.pairs),
        "vocab_size": tok.get_vocab_size(), "epochs": args.epochs, "steps": history[-1]["step"],
        "max_tokens": args.max_tokens, "lr": args.lr, "warmup": args.warmup, "dropout": args.dropout,
        "label_smoothing": args.label_smoothing, "seed": args.seed, "device": str(device),
        "dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads(), "kept": chosen,
        "average_sweep_val_bleu_greedy": average_sweep,
        "wall_seconds": round(time.time() - t_start), "history": history,
    }
    write_json(f"{args.out}/metrics.json", metrics)
    write_translator_card(args.out)  # card + SHA-256 manifest: zoo.load verifies the folder against it
    print(f"saved to {args.out} ({chosen}); wall time {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
