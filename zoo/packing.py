"""Faster float32 inference on CPU: weights laid out once for oneDNN.

PyTorch multiplies by a float32 weight on CPU with MKL's sgemm. On AMD processors such as this
project's machine, MKL runs the few-row products of decoding (one row per beam: (5, 256) @
(256, 8000) for the translator's output projection) at about a third of the speed that oneDNN
reaches once the weight has been reordered into its blocked layout: 0.61 ms against 0.21 ms for that
product, 74 us against 46 us for a (5, 256) @ (256, 1024) feed-forward layer, single-threaded. This
is what torch.compile's weight freezing does on CPU, done by hand for the layers that need it.

The results are the same float32 products, summed in a different order (differences ~1e-6
relative). A packed copy is used only while it is current and only for inference: when a weight or
bias has changed in place since packing (load_state_dict and optimiser steps bump its version
counter), when autograd is recording, or for an input that is not float32 on the CPU, the plain
F.linear runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The row count oneDNN is told to expect; any count works, and packing for 64 was as fast as packing
# for 5 at 5 rows and faster at 40-320 rows (a beam's prefix, a batch of sentences).
PACK_ROWS = 64


class PackedWeight:
    """One or more (out, in) float32 weights, stacked along `out`, with their biases, reordered for
    oneDNN: a single product then computes several projections of the same input. Where oneDNN
    cannot pack (another device or dtype, a build without the op) it is never usable."""

    @torch.no_grad()
    def __init__(self, weights, biases=()):
        biases = [b for b in biases if b is not None]
        self.sources = [*weights, *biases]
        self.versions = [t._version for t in self.sources]
        self.bias = torch.cat(biases) if biases else None
        self.packed = None
        w = weights[0]
        if w.device.type == "cpu" and w.dtype == torch.float32 and torch.backends.mkldnn.is_available():
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(torch.cat(weights), PACK_ROWS)
            except (AttributeError, RuntimeError):  # a PyTorch build without this oneDNN op
                self.packed = None

    def usable(self, x):
        """Whether the packed copy may stand in for its sources when multiplying x."""
        return (self.packed is not None and x.device.type == "cpu" and x.dtype == torch.float32
                and all(t._version == v for t, v in zip(self.sources, self.versions))
                and not (torch.is_grad_enabled() and (x.requires_grad or self.sources[0].requires_grad)))

    def __call__(self, x):
        """x @ W.T + b with the packed weight: (..., in) -> (..., out)."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def linear(x, weight, bias=None, packed=None):
    """F.linear(x, weight, bias), through `packed` (a PackedWeight of them) when it is usable."""
    if packed is not None and packed.usable(x):
        return packed(x)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state_dict) that pack() switches to a oneDNN weight copy."""

    packed = None

    def pack(self):
        self.packed = PackedWeight([self.weight], [self.bias])

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.packed)


def pack_for_inference(model):
    """Call pack() on every submodule that has one (Linears, attention layers); returns model."""
    for module in model.modules():
        if module is not model and hasattr(module, "pack"):
            module.pack()
    return model
