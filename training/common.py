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


def cpu_has_bf16():
    """Whether the CPU multiplies bfloat16 natively (its avx512_bf16 or amx_bf16 flag; Linux)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def pick_dtype(name, device):
    """Autocast dtype: bfloat16 where the hardware does it natively (CUDA, or a CPU with bfloat16
    instructions, where training runs much faster), else float32."""
    if name == "auto":
        name = "bf16" if device.type == "cuda" or cpu_has_bf16() else "fp32"
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
