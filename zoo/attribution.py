"""Is attention an explanation? Attention, and four ways to test it, over one prediction's inputs.

The seed article warns, after Jain and Wallace (2019), that attention weights do not always explain
a prediction. This module puts the hypothesis to the test for one prediction: the target is the
log-probability of one output (a digit, a German token, a masked word), written as a function of the
input tokens' embeddings, and every method scores each input token:

- attention: a chosen head's row for the predicted position, and the mean of the last layer's heads;
- rollout (Abnar and Zuidema 2020): the attention of every layer composed, each layer's mean over
  heads mixed half and half with the identity for the residual stream, rows renormalised;
- gradient x input and integrated gradients (Captum) on the input embeddings;
- leave-one-out: the drop in the target when one token's embedding is replaced by the baseline
  embedding, the reference the others are scored against.

Baselines are documented per model: the translator's padding embedding (a zero vector, its
padding_idx row), PhoBERT's <mask> embedding, and for the sorter, whose vocabulary has neither, a zero
embedding. Nothing here changes a model: gradients are taken with respect to the inputs only
(torch.autograd.grad, which Captum uses), under torch.enable_grad, and no hooks are installed.

Faithfulness, against leave-one-out: each method's Spearman correlation (average ranks for ties;
undefined where leave-one-out is constant), and a deletion curve: the target's probability as the
k top-ranked tokens are replaced by the baseline, k = 0..n, beside random orders; AOPC is the curve's
mean drop below the unperturbed probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# Captum and SciPy are imported where they are used: together they would add a second to the app's
# start-up, and no page load needs them.

METHODS = ("attention", "rollout", "gradient x input", "integrated gradients", "leave-one-out")
IG_STEPS = 32


@dataclass
class Target:
    """One prediction to explain. forward: (N, T, D) input embeddings -> (N,) the target's
    log-probability; embeddings: the input's own (T, D); baseline: (D,), what a removed token becomes;
    candidates: the positions that may be scored (all by default; PhoBERT leaves out <s>, </s> and
    the masked position)."""

    forward: object
    embeddings: torch.Tensor
    baseline: torch.Tensor
    candidates: list | None = None
    # What deletion curves plot: the target's probability (exp of a log-probability), or, for a
    # contrast of two log-probabilities, the difference itself (its exp is an odds ratio, unbounded).
    curve_unit: str = "probability"

    def positions(self):
        return list(range(self.embeddings.size(0))) if self.candidates is None else self.candidates

    def value(self, embeddings):
        with torch.no_grad():
            return self.forward(embeddings)


# ----- the methods ---------------------------------------------------------------------------------

def rollout(maps):
    """maps (L, H, T, T) rows of attention -> (T, T): 0.5 A + 0.5 I per layer (A the mean over heads),
    rows renormalised, multiplied from the first layer up. Row i: how much each input flows into
    position i at the top."""
    maps = np.asarray(maps, dtype=np.float64)
    t = maps.shape[-1]
    out = np.eye(t)
    for layer in maps:
        a = 0.5 * layer.mean(0) + 0.5 * np.eye(t)
        out = (a / a.sum(-1, keepdims=True)) @ out
    return out


def gradient_x_input(target):
    """Captum's InputXGradient on the embeddings, summed over the embedding dimensions: (T,)."""
    from captum.attr import InputXGradient

    with torch.enable_grad():
        e = target.embeddings[None].detach().clone().requires_grad_(True)
        return InputXGradient(target.forward).attribute(e)[0].sum(-1).detach()


def integrated_gradients(target, steps=IG_STEPS):
    """Captum's IntegratedGradients from the baseline to the input in `steps` steps, batched:
    (attributions (T,), convergence delta). Completeness: the attributions sum to
    f(input) - f(baseline), up to the delta."""
    from captum.attr import IntegratedGradients

    with torch.enable_grad():
        e = target.embeddings[None].detach().clone().requires_grad_(True)
        base = target.baseline.expand_as(e).detach()
        attributions, delta = IntegratedGradients(target.forward).attribute(
            e, baselines=base, n_steps=steps, internal_batch_size=steps, return_convergence_delta=True)
    return attributions[0].sum(-1).detach(), float(delta.abs().max())


def replaced(target, groups):
    """The input with each group of positions replaced by the baseline: (len(groups), T, D)."""
    e = target.embeddings.detach().repeat(len(groups), 1, 1)
    for row, positions in enumerate(groups):
        e[row, list(positions)] = target.baseline
    return e


def leave_one_out(target):
    """The target's drop when each candidate position alone is replaced by the baseline: (T,), 0 for
    positions that are not candidates."""
    positions = target.positions()
    full = target.value(target.embeddings[None])[0]
    drops = torch.zeros(target.embeddings.size(0))
    drops[positions] = full - target.value(replaced(target, [[p] for p in positions]))
    return drops


# ----- faithfulness --------------------------------------------------------------------------------

def spearman(a, b):
    """Spearman's rank correlation with average ranks for ties, or None where either is constant."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def deletion_curves(target, orders):
    """For each order, the target's probability (or its curve_unit) with the first k positions of
    the order replaced by the baseline, k = 0..len(order): a list of (len(order) + 1,) tensors. All
    curves go through the model as one batch."""
    groups = [order[:k] for order in orders for k in range(len(order) + 1)]
    values = target.value(replaced(target, groups))
    values = values.exp() if target.curve_unit == "probability" else values
    return list(values.split([len(order) + 1 for order in orders]))


def aopc(curve):
    """Area over the perturbation curve: the mean drop below the unperturbed probability over
    k = 1..n (higher: the ranking found what the prediction needs sooner)."""
    curve = np.asarray(curve, dtype=float)
    return float((curve[0] - curve[1:]).mean()) if len(curve) > 1 else 0.0


def ranked(scores, positions):
    """The candidate positions, highest score first (ties in position order)."""
    return sorted(positions, key=lambda p: (-float(scores[p]), p))


def faithfulness(target, scores, random_orders=8, seed=0):
    """{method: {spearman, aopc, curve}} for scores {method: (T,)}, plus "random": the mean curve
    and AOPC of random orders. Spearman is against leave-one-out over the candidate positions."""
    positions = target.positions()
    reference = np.asarray(scores["leave-one-out"], dtype=float)[positions]
    rng = np.random.default_rng(seed)
    shuffled = [[positions[i] for i in rng.permutation(len(positions))] for _ in range(random_orders)]
    curves = deletion_curves(target, [ranked(s, positions) for s in scores.values()] + shuffled)
    out = {}
    for (method, s), curve in zip(scores.items(), curves, strict=False):
        out[method] = {"spearman": spearman(np.asarray(s, dtype=float)[positions], reference),
                       "aopc": aopc(curve), "curve": curve.tolist()}
    mean_curve = torch.stack(curves[len(scores):]).mean(0)
    out["random"] = {"spearman": None, "aopc": aopc(mean_curve), "curve": mean_curve.tolist()}
    return out


def explain(target, attention_rows, steps=IG_STEPS):
    """Every method's scores over the inputs and their faithfulness, for one prediction.

    attention_rows: {label: (T,)} of attention-based scores, computed by the caller from its maps
    (a head's row, the last layer's mean, the rollout row); labels start with "attention" or
    "rollout". Returns {"scores": {label: list}, "faithfulness": ..., "ig_delta": float,
    "target": f(input), "baseline_target": f(baseline)}."""
    ig, delta = integrated_gradients(target, steps)
    scores = {**{k: np.asarray(v, dtype=float) for k, v in attention_rows.items()},
              "gradient x input": gradient_x_input(target).numpy(), "integrated gradients": ig.numpy(),
              "leave-one-out": leave_one_out(target).numpy()}
    base = target.baseline.expand_as(target.embeddings)[None]
    return {"scores": {k: v.tolist() for k, v in scores.items()}, "faithfulness": faithfulness(target, scores),
            "ig_delta": delta, "target": float(target.value(target.embeddings[None])[0]),
            "baseline_target": float(target.value(base)[0]), "curve_unit": target.curve_unit}


def summary_lines(report):
    """One line per method: its name and Spearman with leave-one-out (the API's first output)."""
    lines = []
    for method, f in report["faithfulness"].items():
        if method == "random":
            continue
        rho = "undefined (leave-one-out is constant)" if f["spearman"] is None else f"{f['spearman']:.3f}"
        lines.append(f"{method}: Spearman with leave-one-out {rho}, AOPC {f['aopc']:.3f}")
    lines.append(f"random order: AOPC {report['faithfulness']['random']['aopc']:.3f}")
    return lines


# ----- the zoo's predictions as targets ------------------------------------------------------------

def attention_rows(maps, row, layer, head, composed=None):
    """The attention-based scores of one query row: the chosen head, the last layer's mean over heads
    and the rollout (composed: a (T, T) rollout to read instead of the maps' own)."""
    maps = np.asarray(maps, dtype=np.float64)
    return {f"attention (layer {layer + 1}, head {head + 1})": maps[layer, head, row],
            "attention (last layer, mean of heads)": maps[-1, :, row].mean(0),
            "rollout": (rollout(maps) if composed is None else composed)[row]}


def layer_rows(maps, row, composed=None):
    """The corpus view, per layer l (from 1): the mean of the heads' rows at layer l and the rollout
    through layer l. composed: for the translator, (L, T_out, S) rollouts read through each decoder
    layer's cross-attention instead of the maps' own."""
    maps = np.asarray(maps, dtype=np.float64)
    rows = {}
    for layer in range(maps.shape[0]):
        rows[f"attention, layer {layer + 1}"] = maps[layer, :, row].mean(0)
        rows[f"rollout, layer {layer + 1}"] = (rollout(maps[: layer + 1]) if composed is None else composed[layer])[row]
    return rows


def translator_maps(model, src_ids, out_ids):
    """The translator's cross-attention (L, H, T_out, S), teacher-forced on out_ids, and its rollout
    through each decoder layer (L, T_out, S): that layer's cross-attention, mean of heads, composed
    with the encoder's rollout over its self-attention (the decoder's own self-attention over earlier
    output tokens is left out: it does not reach the source)."""
    _, enc, _, cross = model.teacher_force(src_ids, out_ids)
    encoder = rollout(enc)  # (S, S): encoder position <- source token
    return cross, np.stack([layer.mean(0) @ encoder for layer in np.asarray(cross, dtype=np.float64)])


def sorter_target(model, digits, position):
    """The sorter's prediction at output `position` for `digits`: the target is the log-probability of
    the digit it predicts there. Baseline: a zero embedding (the digits have no padding or mask
    token). Returns (Target, attention maps (L, H, T, T), the predicted digit)."""
    x = torch.tensor([digits])
    with torch.no_grad():
        logits, maps = model(x, return_attention=True)
    predicted = int(logits[0, position].argmax())

    def forward(e):
        return model.from_embeddings(e, model.mask(x.expand(e.size(0), -1))).log_softmax(-1)[:, position, predicted]

    target = Target(forward, model.embed(x)[0].detach(), torch.zeros(model.d_model))
    return target, torch.stack([m[0] for m in maps]).numpy(), predicted


def translator_target(model, src_ids, out_ids, step):
    """The translator's output token `step` of out_ids (ending with </s>), teacher-forced: the target
    is its log-probability given the source and the tokens before it. The source embeddings are
    varied; the target side is fixed. Baseline: the padding embedding (a zero vector)."""
    # The decoder is causal: the token at `step` depends on the inputs up to it only, so the
    # positions after it are not run (the same value, less work per forward pass).
    src, tgt_in = torch.tensor([src_ids]), torch.tensor([[model.bos_id] + out_ids[:step]])
    token = out_ids[step]

    def forward(e):
        s, t = src.expand(e.size(0), -1), tgt_in.expand(e.size(0), -1)
        memory, mask = model.encode(s, embeddings=e)[:2]
        h = model.decode(t, model.cross_kv(memory), mask)[0]  # (N, step + 1, D)
        return model.project(h[:, -1]).log_softmax(-1)[:, token]

    return Target(forward, model.embed(src)[0].detach(), model.embed.weight[model.pad_id].detach())


def continuation_log_prob(model, cross, mask, prefix_ids, pieces):
    """log p(pieces | source, prefix): each piece's log-probability given the prefix and the pieces
    before it, summed. cross, mask: the encoder output's keys/values and mask, (N, ...) rows."""
    ids = prefix_ids + pieces
    tgt_in = torch.tensor([[model.bos_id] + ids[:-1]]).expand(mask.size(0), -1)  # (N, T)
    logp = model.project(model.decode(tgt_in, cross, mask)[0]).log_softmax(-1)  # (N, T, V)
    return sum(logp[:, len(prefix_ids) + i, p] for i, p in enumerate(pieces))


def contrast_target(model, src_ids, prefix_ids, chosen, alternative):
    """Why `chosen` and not `alternative` after prefix_ids (both id lists; one piece or several):
    the target is log p(chosen | source, prefix) - log p(alternative | source, prefix). The source
    embeddings are varied; baseline: the padding embedding."""
    src = torch.tensor([src_ids])

    def forward(e):
        memory, mask = model.encode(src.expand(e.size(0), -1), embeddings=e)[:2]
        cross = model.cross_kv(memory)
        return (continuation_log_prob(model, cross, mask, prefix_ids, chosen)
                - continuation_log_prob(model, cross, mask, prefix_ids, alternative))

    return Target(forward, model.embed(src)[0].detach(), model.embed.weight[model.pad_id].detach(),
                  curve_unit="log-probability difference")


def alternative_pieces(model, chosen_id, text):
    """The ids of a typed alternative to the token chosen_id, written the way that token is: after
    a space when it starts a new word ('▁der'), glued on when it continues one or starts the output."""
    word = text.strip().lstrip("▁").strip()
    if not word:
        raise ValueError("Type an alternative: a German word or piece to compare with the chosen token.")
    spaced = model.token_strings([chosen_id])[0].startswith("▁")
    return model.tokenizer.encode((" " if spaced else "") + word).ids


@torch.no_grad()
def continuation_log_probs(model, src_ids, prefix_ids, candidates):
    """[log p(c | source, prefix) for c in candidates], each a list of pieces (see
    continuation_log_prob)."""
    memory, mask = model.encode(torch.tensor([src_ids]))[:2]
    cross = model.cross_kv(memory)
    return [float(continuation_log_prob(model, cross, mask, prefix_ids, c)[0]) for c in candidates]
