"""Small pieces every training script shares: device and precision choice, seeding, json."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import torch


def pick_device(name="auto"):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for, but PyTorch sees no CUDA device here")
    return torch.device(name)


def pick_dtype(name, device):
    """Autocast dtype: bfloat16 where the hardware does it natively (CUDA, or CPUs with
    AVX512-BF16/AMX, where it is ~1.6x faster here), else float32."""
    if name == "auto":
        fast_bf16 = device.type == "cuda" or torch.ops.mkldnn._is_mkldnn_bf16_supported()
        name = "bf16" if fast_bf16 else "fp32"
    return {"bf16": torch.bfloat16, "fp32": torch.float32}[name]


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def read_json(path):
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else {}


def write_json(path, data):
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def timed(fn):
    """Seconds one call of fn takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
