"""Faster float32 inference on CPU: weights laid out once for oneDNN.

PyTorch multiplies by a float32 weight on CPU with MKL's sgemm. On AMD processors such as this
project's machine, MKL runs the few-row products of decoding (one row per beam: (5, 256) @
(256, 8000) for the translator's output projection) at about a third of the speed that oneDNN
reaches once the weight has been reordered into its blocked layout: 0.61 ms against 0.21 ms for that
product, 74 us against 46 us for a (5, 256) @ (256, 1024) feed-forward layer, single-threaded.
(torch.compile's weight freezing packs float32 weights for MKL instead; that format measured no
faster here.)

A oneDNN call costs more than MKL's before any arithmetic, so only weights of at least
PACK_MIN_ELEMENTS are packed (the translator's fused q/k/v, feed-forward and output projections, not
its 256 x 256 ones nor any of the sorter's). A packed product can also apply a GELU in the same call,
which the feed-forward layers use (Linear.forward's `activation`).

pack() switches a layer to this path; the copy is made on the first call that can use it, so a path
a model never takes costs no memory. The results are the same float32 products summed in another
order (differences ~1e-6 relative). The copy serves only inference on float32 CPU tensors with
oneDNN enabled, never a call that autograd records, and only while every weight and bias is still
the tensor it was made from, at the same address and version: a replaced, moved or edited parameter
(load_state_dict, an optimiser step, .to(), .data = ...) gets a fresh copy on its next use. Writes
that bypass the version counter (in place through .data, or through a NumPy view) cannot be seen:
call pack() again after them.
"""

from __future__ import annotations

import platform
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# The row count oneDNN is told to expect; any count works, and packing for 64 was as fast as packing
# for 5 at 5 rows and faster at 40-320 rows (a beam's prefix, a batch of sentences).
PACK_ROWS = 64
# A oneDNN product costs ~15 us more per call than MKL's before any arithmetic, which a weight repays
# from about 512 x 256 elements up: at 5 rows a 256 x 256 weight took 20-23 us packed against 15-17
# with MKL (1 or 2 threads), a 512 x 256 one 24-30 against 29-36; at 8 rows the sorter's 64-wide
# weights took 16-18 us against 3-6. Smaller weights stay with F.linear.
PACK_MIN_ELEMENTS = 512 * 256


# Measured on x86-64, where PyTorch's float32 products go to MKL; elsewhere PyTorch's default stays.
ONEDNN_BUILD = platform.machine().lower() in ("x86_64", "amd64") and torch.backends.mkldnn.is_available()


def onednn_ready():
    """Whether packed products can run now (oneDNN present, and not switched off by the user)."""
    return ONEDNN_BUILD and torch.backends.mkldnn.enabled


class PackedCopy(NamedTuple):
    key: list  # source_key of the sources it was made from
    weight: torch.Tensor  # oneDNN's blocked layout of the stacked weights
    bias: torch.Tensor | None
    sources: list  # held, so that no other tensor can take their ids while the key is in use


class PackedWeight:
    """A oneDNN copy of one or more (out, in) weights stacked along `out`, with their biases: one
    product then computes several projections of the same input (q, k and v)."""

    def __init__(self):
        self.state = None  # a PackedCopy, made on first use

    def __call__(self, x, weights, biases, activation=None):
        """x @ cat(weights).T + cat(biases), then `activation` (None or an nn.GELU) inside the same
        oneDNN call; or None where the copy cannot serve this call (the caller then runs F.linear).
        biases: one per weight, all tensors or all None."""
        if not (x.is_cpu and x.dtype == torch.float32 and onednn_ready()):
            return None
        if activation is not None and not isinstance(activation, nn.GELU):
            return None
        present = [b for b in biases if b is not None]
        if 0 < len(present) < len(biases):  # some projections with a bias, some without
            return None
        sources = weights + present
        if torch.is_grad_enabled() and (x.requires_grad or any(t.requires_grad for t in sources)):
            return None
        state = self.state  # read once: another request may swap in a fresh copy meanwhile
        try:
            key = source_key(sources)  # taken before copying, so a change made meanwhile is seen next call
        except RuntimeError:  # inference tensors (made under torch.inference_mode) have no version to check
            return None
        if state is None or state.key != key:
            if not all(t.is_cpu and t.dtype == torch.float32 for t in sources):
                return None
            state = self.state = make_copy(key, weights, present, sources)
        # A GELU is oneDNN's post-op: exact (erf, approximate="none") or tanh, as nn.GELU computes it.
        attr, algorithm = ("none", "") if activation is None else ("gelu", activation.approximate)
        return torch.ops.mkldnn._linear_pointwise(x, state.weight, state.bias, attr, [], algorithm)

    # Copies and pickles (copy.deepcopy, torch.save) leave the oneDNN tensor behind: it has no
    # storage to copy, and the copy makes its own on first use.
    def __getstate__(self):
        return {"state": None}


def source_key(sources):
    """Which tensors, in which state: a replaced parameter changes its id, a moved or reassigned one
    (.to(), .data = ...) its data pointer, one edited in place (load_state_dict, optimiser steps)
    its version."""
    return [(id(t), t.data_ptr(), t._version) for t in sources]


@torch.no_grad()
def make_copy(key, weights, biases, sources):
    """biases: one per weight, or none at all."""
    bias = torch.cat(biases) if biases else None
    packed = torch.ops.mkldnn._reorder_linear_weight(torch.cat(weights), PACK_ROWS)
    return PackedCopy(key, packed, bias, sources)


def linear(x, weight, bias=None, packed=None, activation=None):
    """F.linear(x, weight, bias), then `activation` (a module, or None), through `packed` (a
    PackedWeight, or None) where it can serve: a GELU then runs inside the same call."""
    y = None if packed is None else packed(x, [weight], [bias], activation)
    if y is not None:
        return y
    y = F.linear(x, weight, bias)
    return y if activation is None else activation(y)


def worth_packing(n_elements, min_elements=PACK_MIN_ELEMENTS):
    """A PackedWeight for a weight of n_elements (all stacked weights together), or None where plain
    F.linear is as fast (PACK_MIN_ELEMENTS)."""
    return PackedWeight() if n_elements >= min_elements else None


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) that pack() switches to a oneDNN weight copy."""

    packed = None

    def pack(self, min_elements=PACK_MIN_ELEMENTS):
        self.packed = worth_packing(self.weight.numel(), min_elements)
        return self

    def forward(self, x, activation=None):
        """x @ weight.T + bias, then `activation` (a module such as nn.GELU, or None)."""
        return linear(x, self.weight, self.bias, self.packed, activation)


def pack_for_inference(model, min_elements=PACK_MIN_ELEMENTS):
    """Call pack(min_elements) on every submodule that has one (Linears, attention layers): each packs
    its weights of at least min_elements elements. Returns model."""
    for module in model.modules():
        if module is not model and hasattr(module, "pack"):
            module.pack(min_elements)
    return model
