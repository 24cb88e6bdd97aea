"""Attention Lab's model zoo: what models there are, their records, and the models themselves.

Every model lives in `zoo/checkpoints/<name>/` as config.json + model.safetensors (+ tokenizer,
metrics.json, model card, manifest.json, snapshots/). The app reads models and their records only
through these functions: `available()`, `config(name)`, `metrics(name)`, `load(name)` and
`snapshots(name)`. Loading checks the folder against its SHA-256 manifest, then loads the weights
with strict=True, and returns the model in eval mode.
"""

from __future__ import annotations

import json
from pathlib import Path

from .hub import load_int8, verify_manifest
from .sorter import DigitSorter
from .translator import TransformerTranslator

CHECKPOINTS = Path(__file__).parent / "checkpoints"

MODELS = {
    "sorter-pe": (DigitSorter, "Digit sorter, 2 layers x 4 heads, with sinusoidal positional encoding (sorts)"),
    "sorter-nope": (DigitSorter, "The same sorter without positional encoding (fails: permutation equivariance)"),
    "translator-en-de": (TransformerTranslator, "English->German encoder-decoder, trained on Multi30k"),
}


def available():
    """{name: one-line description} of the models whose checkpoint folder is present."""
    return {name: desc for name, (_, desc) in MODELS.items() if (CHECKPOINTS / name / "config.json").is_file()}


def checkpoint_dir(name):
    if name not in MODELS:
        raise KeyError(f"Unknown model {name!r}. Available: {', '.join(available()) or 'none'}.")
    folder = CHECKPOINTS / name
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"Model {name!r} is not installed (no zoo/checkpoints/{name}/); train it with the "
                                f"script named in README.md. Available: {', '.join(available()) or 'none'}.")
    return folder


def config(name):
    """The model's config.json: the keyword arguments its class is built with."""
    return json.loads((checkpoint_dir(name) / "config.json").read_text())


def metrics(name):
    """The model's metrics.json (training, evaluation, benchmarks, snapshots), {} when it has none."""
    path = checkpoint_dir(name) / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


FINDINGS = Path(__file__).parent / "findings"


def findings(name):
    """What a benchmark measured and wrote for the app to show (zoo/findings/<name>.json), {} if
    it has not run."""
    path = FINDINGS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def load(name):
    """The named model, verified against its manifest, loaded strictly, in eval mode."""
    folder = checkpoint_dir(name)
    verify_manifest(folder)
    return MODELS[name][0].from_pretrained(folder, strict=True)


def snapshots(name):
    """The training snapshots saved beside a model: [{step or epoch, ...its metrics..., model}],
    oldest first, each verified against the folder's manifest and loaded strictly. The sorters keep
    theirs in float32, the translator in int8 (zoo.hub.save_int8); load_int8 reads both."""
    folder = checkpoint_dir(name)
    verify_manifest(folder)
    out = []
    for snap in metrics(name).get("snapshots", []):
        net = MODELS[name][0](**config(name))
        net.load_state_dict(load_int8(folder / snap["file"]), strict=True)
        net.load_extras(str(folder))  # the tokenizer, for models that have one
        out.append({**{k: v for k, v in snap.items() if k != "file"}, "model": net.eval()})
    return out
