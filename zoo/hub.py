"""The one loading rule every zoo model shares: config.json + model.safetensors, strict.

huggingface_hub's PyTorchModelHubMixin gives `save_pretrained` / `from_pretrained` /
`push_to_hub`. Its default loader falls back to a pickled `pytorch_model.bin` and loads non-strictly;
ours reads safetensors only and always with `strict=True`, so a checkpoint that does not match the
code fails loudly instead of leaving random weights behind.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from huggingface_hub import PyTorchModelHubMixin, constants, hf_hub_download
from safetensors.torch import load_file, load_model, save_file
from torch import nn


def resolve_file(model_id, filename, **hub_kwargs):
    """Path of `filename` in a local folder, or downloaded from the Hub repo `model_id`."""
    if os.path.isdir(model_id):
        return os.path.join(model_id, filename)
    return hf_hub_download(repo_id=model_id, filename=filename, **hub_kwargs)


class ZooModel(nn.Module, PyTorchModelHubMixin, library_name="attention-lab"):
    """Base class: an nn.Module whose __init__ keyword arguments are its config.json."""

    @classmethod
    def _from_pretrained(cls, *, model_id, revision, cache_dir, force_download, local_files_only,
                         token, map_location="cpu", strict=True, **model_kwargs):
        model = cls(**model_kwargs)
        path = resolve_file(model_id, constants.SAFETENSORS_SINGLE_FILE, revision=revision,
                            cache_dir=cache_dir, force_download=force_download,
                            local_files_only=local_files_only, token=token)
        load_model(model, path, strict=strict, device=map_location)
        model.load_extras(model_id, revision=revision, cache_dir=cache_dir,
                          force_download=force_download, local_files_only=local_files_only,
                          token=token)
        return model.eval()

    def load_extras(self, model_id, **hub_kwargs):
        """Hook for files that sit beside the weights (a tokenizer); nothing by default."""

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())


# ----- compact snapshots -----------------------------------------------------------------------
# Training snapshots only replay how attention emerged, so they are stored at a quarter of the
# size: each matrix as int8 with one float32 scale per row (symmetric, absmax / 127), each vector
# as float16. A row's worst rounding error is half a step, scale / 2.
SCALE_SUFFIX = ".int8_scale"


def save_int8(state, path):
    """Write a state dict as int8 matrices + per-row scales (+ float16 vectors) to safetensors."""
    out = {}
    for name, value in state.items():
        value = value.detach().float().cpu()
        if value.dim() == 2:
            scale = value.abs().amax(dim=1).clamp(min=1e-12) / 127  # (rows,)
            out[name] = torch.round(value / scale[:, None]).to(torch.int8).contiguous()
            out[name + SCALE_SUFFIX] = scale.contiguous()
        else:
            out[name] = value.half().contiguous()
    save_file(out, str(path))


def load_int8(path):
    """The float32 state dict saved by save_int8 (a plain float safetensors file reads as itself)."""
    stored = load_file(str(path))
    return {name: value.float() * stored[name + SCALE_SUFFIX][:, None] if name + SCALE_SUFFIX in stored
            else value.float() for name, value in stored.items() if not name.endswith(SCALE_SUFFIX)}


MANIFEST = "manifest.json"


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder):
    """Record the SHA-256 of every file in a checkpoint folder (run after any change to it)."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {p.relative_to(folder).as_posix(): _digest(p) for p in files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def verify_manifest(folder):
    """Raise ValueError naming each file that is missing, unexpected or altered."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise ValueError(f"{folder} has no {MANIFEST}: refusing to load an unverified checkpoint")
    expected = json.loads(path.read_text())
    problems = [f"{name}: missing" if not (folder / name).is_file() else f"{name}: SHA-256 differs"
                for name, digest in expected.items()
                if not (folder / name).is_file() or _digest(folder / name) != digest]
    extra = [p.relative_to(folder).as_posix() for p in folder.rglob("*")
             if p.is_file() and p.name != MANIFEST and p.relative_to(folder).as_posix() not in expected]
    problems += [f"{name}: not in the manifest" for name in extra]
    if problems:
        raise ValueError(f"Checkpoint {folder.name} failed its integrity check ({'; '.join(problems)}). "
                         "Restore the folder from git or retrain it.")
