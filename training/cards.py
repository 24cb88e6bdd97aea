"""Model cards (README.md in each zoo folder), rendered from config.json + metrics.json.

Every script that changes a zoo folder re-renders its card and re-writes its SHA-256 manifest
through these functions, so card, metrics and manifest never disagree.
"""

from __future__ import annotations

from pathlib import Path

from training.common import read_json, write_json
from zoo.hub import write_manifest

LOAD_SNIPPET = """```python
import zoo
model = zoo.load("{name}")          # verified against manifest.json, strict=True, eval mode
# or, from a copy of this folder or a Hub repo:
from zoo.{module} import {cls}
model = {cls}.from_pretrained("zoo/checkpoints/{name}")
```"""


def _front_matter(license_id, tags, extra=""):
    return f"---\nlicense: {license_id}\nlibrary_name: attention-lab\ntags:\n" + "".join(
        f"- {t}\n" for t in tags) + extra + "---\n"


def by_seed(accuracies):
    """{seed: accuracy} -> '0.9998, 0.9996 (seeds 0, 2)'."""
    return (", ".join(f"{a:.4f}" for a in accuracies.values())
            + f" (seeds {', '.join(str(k) for k in accuracies)})")


def write_sorter_card(folder):
    folder = Path(folder)
    m, cfg = read_json(folder / "metrics.json"), read_json(folder / "config.json")
    pe = cfg.get("use_pos_encoding", True)
    name = folder.name
    lines = [_front_matter("mit", ["toy", "sorting", "attention-lab"]),
             f"# {name}: digit sorter {'with' if pe else 'without'} positional encoding\n",
             "An encoder-only Transformer that reads 8 digits (0-9) and writes them sorted: output position *i* "
             "predicts the *i*-th smallest digit. Digit embedding (scaled by sqrt(d_model))"
             f"{' + sinusoidal positional encoding' if pe else ' and **no positional encoding**'}, "
             f"{cfg.get('n_layer')} pre-LN blocks (d_model {cfg.get('d_model')}, {cfg.get('n_head')} heads, "
             f"d_ff {cfg.get('d_ff')}, GELU), a linear head per position. **{m.get('parameters'):,} parameters** "
             "(the positional encoding is a fixed table, not a parameter, so both variants have the same count).\n"]
    if not pe:
        lines.append(
            "Without positions self-attention is permutation-equivariant: shuffling the input shuffles every "
            "output the same way, so an output slot cannot tell which rank it should produce. The best any such "
            "model can do is output the most frequent digit of the input, which is right in E[max count]/8 of "
            f"the slots: **{m.get('ceiling_per_position_accuracy')}** (computed exactly over all multisets). "
            "The failure is architectural, not under-training.\n")
    lines += [
        "## Training\n",
        f"`python -m training.train_sorter --variant {'pe' if pe else 'nope'} "
        f"--seed {m.get('seed')}`: {m.get('steps')} steps of {m.get('batch_size')} fresh random sequences, "
        f"{m.get('optimizer')} (peak lr {m.get('lr')}, warmup {m.get('warmup')}, {m.get('schedule')} schedule, "
        f"gradient clipping {m.get('grad_clip')}), {m.get('seconds')} s on {m.get('device')}. "
        f"Final training loss {m.get('final_loss')}.\n",
        "## Evaluation\n",
        f"On {m.get('eval_sequences'):,} fresh sequences (seed {m.get('eval_seed')}, never seen in training):\n",
        "| metric | value |", "| --- | --- |",
        f"| per-position accuracy | {m.get('per_position_accuracy')} |",
        f"| whole-sequence accuracy | {m.get('sequence_accuracy')} |"]
    if not pe:
        lines.append(f"| ceiling for any model without positions | {m.get('ceiling_per_position_accuracy')} |")
    b = m.get("benchmark")
    if b and "median_seconds" in b:
        acc = b["whole_sequence_accuracy"]
        lines += ["", f"Benchmark (`{b['command']}`): ours against the seed article's own model and loop, "
                  f"{b['repeats']} interleaved repeats on {b['threads']} thread(s), training loop only:\n",
                  "| | median wall time (s) | whole-sequence accuracy by seed |", "| --- | --- | --- |",
                  f"| seed article | {b['median_seconds']['article']} | {by_seed(acc['article'])} |",
                  f"| ours | {b['median_seconds']['ours']} | {by_seed(acc['ours'])} |",
                  f"\nRatio ours / article: {b['ratio_of_medians']} (of the medians; pair by pair "
                  f"{b['pair_ratios']['min']}-{b['pair_ratios']['max']}, median {b['pair_ratios']['median']})."]
    lines += ["", "Per output slot: " + ", ".join(f"{a:.3f}" for a in m.get("per_slot_accuracy", [])) + "\n",
              "Snapshots along training (`snapshots/`, for the app's training-step slider): " + ", ".join(
                  f"step {s['step']}: {s['per_position_accuracy']:.3f} / {s['sequence_accuracy']:.3f}"
                  for s in m.get("snapshots", [])) + " (per-position / whole-sequence accuracy).\n"]
    lines += faithfulness_section(m)
    lines += ["## Use\n", LOAD_SNIPPET.format(name=name, module="sorter", cls="DigitSorter"), "",
              "`model(x)` with x a LongTensor (B, 8) of digits gives logits (B, 8, 10); "
              "`model(x, return_attention=True)` gives `(logits, attentions)`, one (B, 4, 8, 8) map per layer.\n"]
    (folder / "README.md").write_text("\n".join(lines))
    write_manifest(folder)


def faithfulness_section(m):
    """Is attention an explanation of this model? The corpus test of training.faithfulness."""
    f = m.get("faithfulness")
    if not f:
        return []
    lines = ["## Is attention an explanation?\n",
             f"`{f['command']}`: {f['predictions']:,} predictions ({f['what']}). Each is explained per layer by "
             "the heads' mean attention row and by attention rollout, and on the input embeddings by gradient x "
             f"input, integrated gradients (Captum, {f['ig_steps']} steps) and leave-one-out. Spearman: rank "
             "agreement with leave-one-out, the mean over the predictions where it is defined (it is not where "
             "leave-one-out changes nothing; those are counted). AOPC: the mean drop of the prediction's "
             "probability as the top-ranked inputs are replaced by the baseline (the padding embedding) one by "
             "one; higher is more faithful, against "
             f"**{f['random_aopc']}** for random orders. {f['seconds']} s.\n",
             "| layer | method | Spearman with leave-one-out | AOPC | undefined |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['layer']} | {r['method']} | {'' if r['spearman'] is None else r['spearman']} | {r['aopc']} | "
              f"{r['undefined']} |" for r in f["rows"]]
    return lines + ["", f['verdict'] + "\n"]


def store(folder, key, record, write_card):
    """Put `record` under `key` in the folder's metrics.json, then re-render its card (and manifest)."""
    folder = Path(folder)
    metrics = read_json(folder / "metrics.json")
    metrics[key] = record
    write_json(folder / "metrics.json", metrics)
    write_card(folder)
    print(f"wrote {folder / 'metrics.json'} ({key}) and the card", flush=True)


def write_translator_card(folder):
    """The translator's card, one section per part of its record (metrics.json)."""
    folder = Path(folder)
    m, cfg = read_json(folder / "metrics.json"), read_json(folder / "config.json")
    sections = [translator_header(folder, m, cfg), translator_training(m), translator_snapshots(folder, m),
                translator_evaluation(m), translator_retraining(m), translator_speed(m), translator_heads(m),
                translator_ood(m),
                faithfulness_section(m),
                ["## Use\n", LOAD_SNIPPET.format(name=folder.name, module="translator", cls="TransformerTranslator"),
                 "", "```python\nmodel.translate([\"A man is riding a bicycle.\"], beam_size=5)\n"
                 "info = model.explain(\"A dog runs in the snow.\")      # tokens, attention maps, top-5 per step\n"
                 "ref = model.force_decode(\"A dog runs.\", \"Ein Hund rennt.\")  # per-token probabilities\n```\n"]]
    (folder / "README.md").write_text("\n".join(line for section in sections for line in section))
    write_manifest(folder)


def translator_header(folder, m, cfg):
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6 if (folder / "model.safetensors").exists() else 0
    params = m.get("training", {}).get("parameters", 0)
    return [_front_matter("cc-by-nc-4.0", ["translation", "multi30k", "attention-lab"],
                          "language:\n- en\n- de\ndatasets:\n- multi30k\n"),
            "# translator-en-de: a small English→German Transformer\n",
            f"Encoder–decoder Transformer: {cfg.get('n_enc_layer')}+{cfg.get('n_dec_layer')} pre-LN layers, "
            f"d_model {cfg.get('d_model')}, {cfg.get('n_head')} heads, d_ff {cfg.get('d_ff')}, sinusoidal "
            f"positions, one {cfg.get('vocab_size')}-token byte-level BPE vocabulary shared by English and German "
            "and one embedding matrix shared by source, target and output projection. "
            f"**{params:,} parameters**, {size_mb:.1f} MB of safetensors. "
            f"Inputs longer than {cfg.get('max_len', 128) - 1} subword tokens are refused.\n",
            "Trained for teaching: every attention map (encoder self-attention, decoder self-attention, "
            "cross-attention) can be returned and inspected. It knows the Flickr image-description domain "
            "(people, dogs, streets, sports); outside it, expect mistakes.\n",
            "## Data and licence\n",
            "Multi30k task 1 (29,000 training pairs, 1,014 validation, 1,000 test_2016_flickr). The data is "
            "provided for **non-commercial research and educational use**; so is this model "
            "(CC BY-NC 4.0). Please cite:\n",
            "> Desmond Elliott, Stella Frank, Khalil Sima'an, Lucia Specia. Multi30K: Multilingual "
            "English-German Image Descriptions. Proceedings of the 5th Workshop on Vision and Language, 2016. "
            "doi:10.18653/v1/W16-3210\n"]


def translator_training(m):
    tr = m.get("training", {})
    kept = str(tr.get("kept", ""))
    why = ("it matched or beat every single epoch on greedy val BLEU" if kept.startswith("average")
           else "best greedy BLEU on val; the average of the last epochs scored lower")
    lines = ["## Training\n", f"`{tr.get('command', 'python -m training.train_translator')}`\n",
             f"{tr.get('epochs')} epochs ({tr.get('steps')} steps) of about {tr.get('max_tokens')} padded tokens "
             f"per batch; Adam (0.9, 0.98), peak lr {tr.get('lr')} after {tr.get('warmup')} warmup steps, cosine "
             f"decay; dropout {tr.get('dropout')}, label smoothing {tr.get('label_smoothing')}; seed "
             f"{tr.get('seed')}; {tr.get('dtype')} autocast on {tr.get('device')} with {tr.get('threads')} threads. "
             f"Kept: {kept} ({why}{_average_sweep(tr)}). "
             f"**Wall time {tr.get('wall_seconds', 0) / 60:.0f} min** on the project's 2-core CPU machine "
             "(tokenizer, training, per-epoch validation and snapshot scoring included). "
             f"{tr.get('wall_note', '')}\n"]
    hist = tr.get("history", [])
    if hist:
        lines += ["| epoch | train loss | val loss | val BLEU (greedy) |", "| --- | --- | --- | --- |"]
        lines += [f"| {h['epoch']} | {h['train_loss']} | {h['val_loss']} | {h['val_bleu_greedy']} |"
                  for h in hist if h["epoch"] % 3 == 0 or h["epoch"] in (1, len(hist))]
        lines.append("")
    return lines


def _average_sweep(tr):
    sweep = tr.get("average_sweep_val_bleu_greedy")
    return ("; greedy val BLEU: " + ", ".join(f"{k} → {v}" for k, v in sweep.items())) if sweep else ""


def translator_snapshots(folder, m):
    snaps = m.get("snapshots", [])
    if not snaps:
        return []
    size = sum((folder / s["file"]).stat().st_size for s in snaps if (folder / s["file"]).exists()) / 1e6
    lines = [f"Snapshots along training (`snapshots/`, {size:.1f} MB in all, for the app's training-snapshot "
             "slider) keep each weight matrix in int8 with one float32 scale per row, each vector in "
             "float16 (`zoo.hub.save_int8`); their greedy val BLEU is measured on the weights as stored:\n",
             "| after epoch | step | val loss | val BLEU greedy (float32) | val BLEU greedy (int8, as stored) |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {s['epoch']} | {s['step']} | {s['val_loss']} | {s['val_bleu_greedy']} | "
              f"{s['val_bleu_greedy_int8']} |" for s in snaps]
    return lines + [""]


def translator_evaluation(m):
    ev = m.get("evaluation")
    if not ev:
        return []
    sweep = ev.get("length_penalty_sweep_val_bleu_lc")
    chosen_on = (" (chosen on val: " + ", ".join(f"{k} → {v}" for k, v in sweep.items()) + " lowercased val BLEU)"
                 if sweep else "")
    lines = ["## Evaluation\n",
             f"`{ev.get('command', 'python -m training.evaluate_translator')}` — sacreBLEU "
             f"{ev.get('sacrebleu_version')}, beam {ev.get('beam_size')}, length penalty "
             f"{ev.get('length_penalty')}{chosen_on}.\n",
             "| split | BLEU (cased, 13a) | BLEU (lowercased) | chrF | BLEU (lowercased, Moses-tokenized) |",
             "| --- | --- | --- | --- | --- |"]
    columns = ("bleu", "bleu_lc", "chrf", "bleu_lc_moses_tokenized")  # the last is absent from older records
    lines += ["| " + " | ".join([split, *(f"{r[c]:.1f}" if c in r else "" for c in columns)]) + " |"
              for split, r in ev.get("splits", {}).items()]
    lines += ["", f"Signature: `{ev.get('signature', '')}`. The last column scores the text as the published "
              "Multi30k baselines did (fairseq's transformer_tiny: 41.0 on test_2016, Wu et al. 2021): "
              "hypotheses and references Moses-normalized and Moses-tokenized (sacremoses, German, no aggressive "
              "dash splitting), lowercased, and counted on those tokens (sacreBLEU `tokenize=\"none\"`, as "
              "multi-bleu.perl counts). The other BLEU columns score detokenized output against the raw "
              "references.\n"]
    if "examples" in ev:
        lines += ["Examples (val split):\n"] + [f"- {e['en']}\n  → {e['hyp']}" for e in ev["examples"]] + [""]
    return lines


def translator_retraining(m):
    """The runs made toward the anchor's score, side by side, and what came of them."""
    rt = m.get("retraining")
    if not rt:
        return []
    lines = ["## Toward the anchor\n", f"Goal: {rt['goal']}. Anchor: {rt['anchor']}.\n",
             "| run | parameters | epochs | wall (min) | tokens/s | kept | length penalty (val) | val BLEU lc | "
             "test BLEU cased / lc / Moses-tokenized lc | test chrF | shipped |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rt["runs"]:
        test = r["test_2016_flickr"]
        bleus = f"{test['bleu']} / {test['bleu_lc']} / {test.get('bleu_lc_moses_tokenized', '–')}"
        lines.append(f"| {r['run']} | {r['parameters']:,} | {r['epochs']} | {r['wall_minutes']} | "
                     f"{r['median_tokens_per_second']:,} | {r['kept']} | {r['length_penalty']} | "
                     f"{r['val']['bleu_lc']} | {bleus} | {test['chrf']} | {'yes' if r['shipped'] else 'no'} |")
    lines.append("")
    lines += [f"- {r['run']}: `{r['command']}`. {r['note']}" for r in rt["runs"]]
    return lines + ["", rt["verdict"] + "\n"]


def translator_speed(m):
    lat = m.get("latency")
    if not lat or "runs" not in lat:
        return []
    lines = ["## Speed\n",
             f"`{lat['command']}` on the {lat['cores']}-core CPU machine, beam {lat['beam_size']}, medians of "
             f"{lat['repeats']} runs. The app runs each request on {lat['app_threads']} thread(s) (two requests "
             "at a time); PyTorch's default gives one request every core. Beam search with the key/value cache "
             "against no cache (every step reruns the decoder over the prefix and recomputes every key and "
             "value, as a decoder without a cache does), side by side:\n",
             "| threads | workload | KV cache (ms) | no cache (ms) | speed-up |", "| --- | --- | --- | --- | --- |"]
    for run in lat["runs"]:
        lines += [f"| {run['threads']} | {name} | {r['median_ms_cached']} | {r['median_ms_no_cache']} | "
                  f"{r['speedup']}x |" for name, r in run["cache_vs_recompute"].items()]
    lines.append("\n" + "; ".join(f"{run['threads']} thread(s): a 12-word sentence translates in "
                                   f"**{run['median_ms_translate']} ms** end to end" for run in lat["runs"])
                 + ". The cache saves more the longer the output and the larger the batch: without it, every "
                   "step recomputes the whole prefix.\n")
    return lines


def translator_heads(m):
    """Which heads matter: val BLEU with each head off, the gradient score, the pruning curves."""
    h = m.get("head_importance")
    if not h:
        return []
    lines = ["## Which heads matter\n",
             f"`{h['command']}` on all {h['sentences']:,} val sentences ({h['measure']}, beam {h['beam_size']}; "
             f"{h['base_bleu']} with every head). Delta BLEU: the change with that head alone switched off (its "
             "output zeroed). Gradient: Michel et al. (2019)'s importance, the mean |d loss / d gate| of the "
             "references' loss, normalised per layer. "
             f"{h['seconds']:.0f} s.\n",
             "| kind | layer | head | delta BLEU | gradient score |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['kind']} | {r['layer']} | {r['head']} | {r['delta_bleu']:+.2f} | {r['gradient']} |"
              for r in h["rows"]]
    lines += ["", "Pruning, least important first (val BLEU with that many heads off):\n",
              "| heads off | " + " | ".join(str(c["pruned"]) for c in next(iter(h["pruning"].values()))) + " |",
              "| --- " * (1 + len(next(iter(h["pruning"].values())))) + "|"]
    lines += [f"| by {name} | " + " | ".join(f"{c['bleu']:.1f}" for c in curve) + " |"
              for name, curve in h["pruning"].items()]
    return lines + ["", h["verdict"] + "\n"]


def translator_ood(m):
    """The out-of-domain warning: its score, threshold and how well it separates."""
    o = m.get("ood")
    if not o:
        return []
    return ["## Out-of-domain warning\n",
            f"`{o['command']}`. The model knows Flickr image captions. Score: the {o['score']}. The app warns "
            f"below the {o['warn_below_percentile']:g}th percentile of val ({o['threshold']}). Against "
            f"{o['ood_sentences']} out-of-domain sentences written for this (`{o['ood_file']}`): AUROC "
            f"**{o['auroc_val_vs_ood']}** (val against them); {o['ood_warned']:.0%} of them are warned; false "
            f"warnings on test_2016_flickr: **{o['false_warnings_test_2016']:.1%}**. Medians: "
            + ", ".join(f"{k} {v}" for k, v in o["medians"].items()) + ".\n",
            *(["Examples (a score below the threshold is warned; a sentence made of in-domain words can pass "
               "even where its translation is wrong):\n"]
              + [f"- \"{e['en']}\": {e['score']}, " + ("warned" if e["score"] < o["threshold"] else "not warned")
                 for e in o["examples"]] + [""] if o.get("examples") else [])]
