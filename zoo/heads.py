"""Which of the translator's heads matter (Michel et al. 2019, "Are Sixteen Heads Really Better
than One?"; Voita et al. 2019).

A head is switched off with the translator's head_mask (its output zeroed before the heads are
merged, for one call only). Three measures read the same grid, (kind, layer, head):
- the change in a corpus's BLEU with one head off (training.head_importance runs it on val),
- Michel et al.'s gradient score: the mean |dL/dxi_h| of the reference's loss with respect to a
  gate xi_h = 1 on each head's output, each layer's scores divided by their L2 norm as in their code,
- for one sentence: the change in its translation's teacher-forced log-probability with one head off.
"""

from __future__ import annotations

import torch

from .translator import HEAD_MASK_KEYS

KIND_NAMES = {"encoder": "encoder self", "decoder_self": "decoder self", "cross": "cross"}


def grid_shape(model):
    """{kind: (n_layer, n_head)} of every head a head_mask can switch off."""
    n_head = model.decoder[0].self_attn.n_head
    return {kind: (len(model.encoder) if kind == "encoder" else len(model.decoder), n_head)
            for kind in HEAD_MASK_KEYS}


def every_head(model):
    """[(kind, layer, head)], 0-based, in the grid's order: encoder, decoder self, cross."""
    return [(kind, layer, head) for kind, (n_layer, n_head) in grid_shape(model).items()
            for layer in range(n_layer) for head in range(n_head)]


def mask_without(model, heads):
    """A head_mask with the heads in `heads` ([(kind, layer, head)]) switched off, the rest kept."""
    mask = {kind: torch.ones(shape) for kind, shape in grid_shape(model).items()}
    for kind, layer, head in heads:
        mask[kind][layer, head] = 0.0
    return mask


def pair_tensors(model, src_ids, out_ids):
    """One sentence's (src, tgt_in, tgt_out), each (1, T): out_ids ends with </s>."""
    return (torch.tensor([src_ids]), *model.teacher_batch([out_ids]))


@torch.inference_mode()
def sentence_effects(model, src_ids, out_ids):
    """For each head, the change in log p(out_ids | src_ids) when that head alone is off (negative:
    the head helped this translation). Returns (log-prob with every head, {kind: (n_layer, n_head)
    tensor of changes})."""
    src, tgt_in, tgt_out = pair_tensors(model, src_ids, out_ids)
    base = model.sequence_log_prob(src, tgt_in, tgt_out).item()
    grid = {kind: torch.zeros(shape) for kind, shape in grid_shape(model).items()}
    for kind, layer, head in every_head(model):
        off = model.sequence_log_prob(src, tgt_in, tgt_out, mask_without(model, [(kind, layer, head)])).item()
        grid[kind][layer, head] = off - base
    return base, grid


def gradient_importance(model, batches):
    """Michel et al.'s score per head: mean over batches of |d loss / d gate| (the gates all 1), each
    layer's row divided by its L2 norm. batches: iterable of (src, tgt_in, tgt_out) tensors with
    references, padded with pad_id. Returns {kind: (n_layer, n_head) tensor}."""
    gates = {kind: torch.ones(shape, requires_grad=True) for kind, shape in grid_shape(model).items()}
    total = {kind: torch.zeros(shape) for kind, shape in grid_shape(model).items()}
    n = 0
    for src, tgt_in, tgt_out in batches:
        tokens = (tgt_out != model.pad_id).sum()
        loss = -model.sequence_log_prob(src, tgt_in, tgt_out, gates).sum() / tokens
        grads = torch.autograd.grad(loss, list(gates.values()))
        for kind, g in zip(gates, grads, strict=True):
            total[kind] += g.abs()
        n += 1
    return {kind: (t / n) / (t / n).norm(dim=1, keepdim=True).clamp_min(1e-20) for kind, t in total.items()}


def rows_of(grids):
    """[{kind, layer, head, <name>: value, ...}] from {name: {kind: grid}}, layers and heads from 1."""
    first = next(iter(grids.values()))
    return [{"kind": KIND_NAMES[kind], "layer": layer + 1, "head": head + 1,
             **{name: round(float(grids[name][kind][layer, head]), 4) for name in grids}}
            for kind, grid in first.items() for layer in range(grid.shape[0]) for head in range(grid.shape[1])]
