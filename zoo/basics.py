"""Attention basics: the small computations behind the "Attention basics" tab.

Each function is one panel of the tab: the Q·K·V playground, why scores are divided by sqrt(d_k),
masks on the right and the wrong axis, sinusoidal positions and the permutation check, the
quadratic cost, our attention against PyTorch's, and where a model's parameters live. Everything
runs on zoo.attention, so what the tab shows is what the zoo models compute.

Inputs come from a public web page: every function checks its arguments and raises ValueError with
a message meant for the reader (what was wrong, what is accepted), and sizes are capped so that no
call takes more than a few seconds or a few hundred MB.
"""

from __future__ import annotations

import math
import numbers
import re
import statistics
import time
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from .attention import (
    FeedForward,
    MultiHeadAttention,
    causal_mask,
    key_padding_mask,
    scaled_dot_product_attention,
    sinusoidal_positions,
)

# The article's four tokens, used as Q, K and V in its worked example.
ARTICLE_VECTORS = ((1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1))
MAX_VECTORS, MAX_DIM, MAX_ABS, MAX_CHARS = 12, 16, 1000.0, 2000

# Figures the article printed for d_k = 64 (its sampling set-up is not stated).
ARTICLE_SCALING = {"std_raw": 8.00, "std_scaled": 1.00, "max_raw": 0.687, "max_scaled": 0.096}
SCALING_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
MAX_D_K = 1024

MAX_MASK_TOKENS = 12
MAX_POSITIONS, MAX_D_MODEL = 512, 512

COST_LENGTHS = (256, 512, 1024, 2048, 4096)

PARTS = ("embeddings", "attention", "feed-forward", "norms", "head")


def whole_number(value, what, lo, hi):
    """value as an int in [lo, hi], or a ValueError saying which whole numbers are accepted.

    Sliders send floats (64.0), API clients may send anything: accept any integral real number."""
    accepted = f"{what} must be a whole number from {lo} to {hi}"
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            or value != int(value)):
        raise ValueError(f"{accepted}; got {str(value)[:30]!r}.")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{accepted}; got {int(value)}.")
    return int(value)


# ----- 1. Q·K·V playground ----------------------------------------------------------------------

def parse_numbers(line, where):
    """One typed vector: finite numbers within +-MAX_ABS, at most MAX_DIM of them."""
    row = []
    for word in (w for w in re.split(r"[\s,]+", line) if w):
        try:
            x = float(word)
        except ValueError:
            raise ValueError(f"{where}: {word[:20]!r} is not a number. Type {VECTORS_EXAMPLE}.") from None
        if not math.isfinite(x) or abs(x) > MAX_ABS:
            raise ValueError(f"{where}: {word[:20]!r} is out of range; "
                             f"finite numbers from {-MAX_ABS:g} to {MAX_ABS:g} are accepted.")
        row.append(x)
    if len(row) > MAX_DIM:
        raise ValueError(f"{where} has {len(row)} numbers; at most {MAX_DIM} are accepted.")
    return row


VECTORS_EXAMPLE = "one vector per line, numbers separated by commas or spaces, e.g. [1, 0, 0]"


def parse_vectors(text, what="Q"):
    """'[1, 0, 0]\\n[0, 1, 0]' -> float64 tensor (n, d).

    One vector per line (or separated by ';'); numbers separated by commas or spaces; brackets are
    ignored. float64 because these are the article's hand-checkable numbers, not a model.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what} is empty: type {VECTORS_EXAMPLE}.")
    if len(text) > MAX_CHARS:
        raise ValueError(f"{what} is {len(text):,} characters long; at most {MAX_CHARS:,} are accepted "
                         f"({MAX_VECTORS} vectors of at most {MAX_DIM} numbers).")
    lines = [re.sub(r"[\[\]()]", " ", line).strip() for line in re.split(r"[\n;]", text)]
    lines = [line for line in lines if line.strip(" ,")]
    if not lines:
        raise ValueError(f"{what} holds no numbers: type {VECTORS_EXAMPLE}.")
    if len(lines) > MAX_VECTORS:
        raise ValueError(f"{what} has {len(lines)} vectors; at most {MAX_VECTORS} are accepted.")
    rows = []
    for i, line in enumerate(lines):
        row = parse_numbers(line, f"{what}, vector {i + 1}")
        if rows and len(row) != len(rows[0]):
            raise ValueError(f"{what}: vector 1 has {len(rows[0])} numbers but vector {i + 1} has {len(row)}; "
                             "every vector needs the same length.")
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)  # (n, d)


def qkv_attention(q, k=None, v=None):
    """The article's worked example: softmax(Q K^T / sqrt(d_k)) V for small typed-in vectors.

    q: (T_q, d_k), k: (T_k, d_k), v: (T_k, d_v); k defaults to q and v to k (with neither given:
    self-attention on the raw vectors, as in the article). Returns scores (T_q, T_k), weights (T_q, T_k), their row sums
    (T_q,) and the output (T_q, d_v).
    """
    k = q if k is None else k
    v = k if v is None else v
    if k.size(1) != q.size(1):
        raise ValueError(f"K's vectors have {k.size(1)} numbers but Q's have {q.size(1)}; queries and keys "
                         "need the same length (d_k) for their dot products.")
    if v.size(0) != k.size(0):
        raise ValueError(f"V has {v.size(0)} vectors but K has {k.size(0)}; every key needs exactly one value.")
    out, weights = scaled_dot_product_attention(q, k, v)
    return {"scores": q @ k.T / math.sqrt(q.size(1)), "weights": weights, "row_sums": weights.sum(-1),
            "output": out}


# ----- 2. Why divide by sqrt(d_k) ---------------------------------------------------------------

@dataclass(frozen=True)
class ScalingStats:
    """Dot products of random unit-variance Gaussian q and k, with and without / sqrt(d_k).

    std_*: standard deviation of the n_queries * n_keys scores; max_*: the largest softmax weight
    over each query's n_keys scores, averaged over queries (1/n_keys = uniform, 1 = one-hot)."""

    d_k: int
    n_queries: int
    n_keys: int
    std_raw: float
    std_scaled: float
    max_raw: float
    max_scaled: float


def scaling_stats(d_k, n_queries=2000, n_keys=64, seed=0):
    """Measure ScalingStats at d_k (1..1024), deterministically for a given seed."""
    return _measure_scaling(whole_number(d_k, "d_k", 1, MAX_D_K), n_queries, n_keys, seed)


@lru_cache(maxsize=64)
def _measure_scaling(d_k, n_queries, n_keys, seed, chunk=250):
    # Every query gets its own n_keys fresh keys; chunks of queries keep memory at
    # chunk * n_keys * d_k floats (65 MB at d_k = 1024) instead of 8x that.
    g = torch.Generator().manual_seed(seed)
    scores = []
    for start in range(0, n_queries, chunk):
        m = min(chunk, n_queries - start)
        q = torch.randn(m, 1, d_k, generator=g)
        k = torch.randn(m, n_keys, d_k, generator=g)
        scores.append((q @ k.transpose(1, 2)).squeeze(1))  # (m, n_keys)
    raw = torch.cat(scores)  # (n_queries, n_keys)
    scaled = raw / math.sqrt(d_k)
    top = lambda s: s.softmax(-1).amax(-1).mean().item()  # noqa: E731
    return ScalingStats(d_k, n_queries, n_keys, raw.std().item(), scaled.std().item(), top(raw), top(scaled))


def scaling_curves(dims=SCALING_GRID):
    """ScalingStats for each d_k in dims (cached: the tab draws these curves on every change)."""
    return [scaling_stats(d) for d in dims]


# ----- 3. Masks ---------------------------------------------------------------------------------

def mask_demo(n_tokens=6, n_pad=2, wrong_axis=False, seed=0, d=8):
    """Causal and padding masks on n_tokens random tokens whose last n_pad are padding.

    The padding mask belongs on the key axis (what zoo.attention.key_padding_mask builds): no query
    may look at a pad. wrong_axis=True puts it on the query axis instead, the classic bug: real
    tokens keep attending to pads, and the pads' own rows are fully masked.

    Returns the masks and weights (T, T), and the symptom in numbers: pad_mass (mean weight the real
    queries put on pad keys), leak (largest change of a real token's output when the pads' contents
    change; 0 means the pads are truly invisible) and pad_row_sums (the weight rows of the pads).
    """
    n = whole_number(n_tokens, "The number of tokens", 2, MAX_MASK_TOKENS)
    p = whole_number(n_pad, "The number of padding tokens", 0, n - 1)
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, n, d, generator=g).unbind(0)  # each (T, d)
    valid = torch.arange(n) < n - p  # (T,) True for real tokens
    right = key_padding_mask(valid[None])[0, 0]  # (1, T): acts on keys, broadcast over queries
    padding = (valid[:, None] if wrong_axis else right).expand(n, n)  # (T, T)
    causal = causal_mask(n)
    out, weights = scaled_dot_product_attention(q, k, v, padding)
    causal_weights = scaled_dot_product_attention(q, k, v, causal & padding)[1]
    # Same real tokens, different pads: with the mask on the right axis nothing real may change.
    k2, v2 = k.clone(), v.clone()
    k2[~valid], v2[~valid] = torch.randn(2, p, d, generator=g).unbind(0)
    out2 = scaled_dot_product_attention(q, k2, v2, padding)[0]
    return {
        "valid": valid, "causal": causal, "padding": padding, "weights": weights,
        "causal_weights": causal_weights,
        "pad_mass": weights[valid][:, ~valid].sum(-1).mean().item(),
        "leak": (out2 - out)[valid].abs().max().item(),
        "pad_row_sums": weights[~valid].sum(-1),
    }


# ----- 4. Positional encoding -------------------------------------------------------------------

def check_d_model(d_model):
    d = whole_number(d_model, "d_model", 2, MAX_D_MODEL)
    if d % 2:
        raise ValueError(f"d_model must be even (sines and cosines come in pairs); got {d}.")
    return d


def positional_table(n_positions, d_model):
    """The (n_positions, d_model) sinusoidal table of zoo.attention, with the tab's limits."""
    n = whole_number(n_positions, "The number of positions", 1, MAX_POSITIONS)
    return sinusoidal_positions(n, check_d_model(d_model))


def shift_matrix(k, d_model):
    """The (d, d) matrix M_k with PE[pos + k] = M_k PE[pos] for every pos, built from the formula.

    Dimensions 2i and 2i+1 hold sin(pos w_i) and cos(pos w_i); the angle-sum identities give
    sin((pos + k) w) = cos(k w) sin(pos w) + sin(k w) cos(pos w) and
    cos((pos + k) w) = -sin(k w) sin(pos w) + cos(k w) cos(pos w): one 2 x 2 rotation by k w_i per
    pair, the same for every position. That is the lesson's "PE[pos+k] is a linear function of
    PE[pos]"."""
    d = check_d_model(d_model)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,) the w_i
    c, s = torch.cos(k * inv_freq), torch.sin(k * inv_freq)
    m = torch.zeros(d, d, dtype=torch.float64)
    m[0::2, 0::2], m[0::2, 1::2] = torch.diag(c), torch.diag(s)
    m[1::2, 0::2], m[1::2, 1::2] = torch.diag(-s), torch.diag(c)
    return m


def relative_shift(k, d_model=32, n_positions=64):
    """Apply M_k to PE[0..n-1] and compare with PE[k..k+n-1]: the matrix and, per position, the
    largest |M_k PE[pos] - PE[pos + k]| (float32 rounding: ~1e-6)."""
    k = whole_number(k, "The offset k", 1, MAX_POSITIONS)
    n = whole_number(n_positions, "The number of positions", 1, MAX_POSITIONS)
    m = shift_matrix(k, d_model)
    pe = sinusoidal_positions(n + k, m.size(0)).double()  # (n + k, d)
    residual = (pe[:n] @ m.T - pe[k:]).abs().amax(-1)  # (n,)
    return {"matrix": m, "residual": residual, "max_residual": residual.max().item()}


def init_seeded_(module, seed):
    """Redraw every parameter of module from its own generator, like nn.Linear's default init
    (uniform +-1/sqrt(fan_in)), so the same seed always gives the same layer."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            bound = 1 / math.sqrt(p.size(-1) if p.dim() > 1 else p.numel())
            p.copy_(torch.rand(p.shape, generator=g) * 2 * bound - bound)
    return module.eval()


@torch.inference_mode()
def permutation_check(d_model=32, n_tokens=8, seed=0):
    """Permute the tokens, run attention, un-permute: is the result the unpermuted output?

    Self-attention without positions is permutation-equivariant (a sum over keys does not care
    about their order), so the difference is ~1e-7 (float rounding). Adding the sinusoidal
    positions ties each token to its slot, so the same shuffle changes the result.
    Returns the permutation and the max |difference| without and with positional encoding.
    """
    d = check_d_model(d_model)
    seed = whole_number(seed, "The seed", 0, 2**31 - 1)
    attn = init_seeded_(MultiHeadAttention(d, 1), seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, n_tokens, d, generator=g)  # (B, T, D) token embeddings
    perm = torch.randperm(n_tokens, generator=g)
    unperm = perm.argsort()
    pe = sinusoidal_positions(n_tokens, d)

    def gap(add):
        """Largest |f(shuffled)[unshuffled] - f(original)| when `add` is added at each slot."""
        shuffled = attn(x[:, perm] + add)[0][:, unperm]
        return (shuffled - attn(x + add)[0]).abs().max().item()

    return {"perm": perm.tolist(), "without_pe": gap(0.0), "with_pe": gap(pe)}


# ----- 5. The quadratic cost --------------------------------------------------------------------

def median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.inference_mode()
def attention_cost(lengths=COST_LENGTHS, n_head=4, d_head=16, repeats=3, budget_s=4.0, max_mb=300.0,
                   progress=None):
    """Time one attention layer (batch 1) at each sequence length, ours against PyTorch's.

    Ours materialises the (B, H, T, T) score matrix, B*H*T*T*4 bytes (268 MB at T = 4096; the
    softmax output is a second matrix of the same size while it is computed).
    F.scaled_dot_product_attention uses a fused flash / memory-efficient kernel that works in
    blocks and never holds the whole matrix. Caps: a length whose score matrix exceeds max_mb is
    skipped, and so is one whose predicted time (quadratic growth from the previous length) would
    take the whole run past budget_s seconds. progress(fraction, what), when given, hears of each length.

    Returns rows {T, ours_s, torch_s, score_mb} and skipped [(T, reason)].
    """
    g = torch.Generator().manual_seed(0)
    start, rows, skipped = time.perf_counter(), [], []
    last_t, last_s = None, 0.0
    for i, t in enumerate(sorted(lengths)):
        if progress:
            progress(i / len(lengths), f"T = {t}")
        mb = n_head * t * t * 4 / 1e6  # B = 1, float32
        if mb > max_mb:
            skipped.append((t, f"its {mb:.0f} MB score matrix is over the {max_mb:.0f} MB cap"))
            continue
        predicted = last_s * (t / last_t) ** 2 if last_t else 0.0
        if time.perf_counter() - start + predicted > budget_s:
            skipped.append((t, f"it would take the run past its {budget_s:g} s time budget"))
            continue
        q, k, v = torch.randn(3, 1, n_head, t, d_head, generator=g).unbind(0)  # each (B, H, T, Dh)
        t0 = time.perf_counter()
        ours = median_seconds(lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v), repeats)
        fused = median_seconds(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v), repeats)
        last_t, last_s = t, time.perf_counter() - t0
        rows.append({"T": t, "ours_s": ours, "torch_s": fused, "score_mb": mb})
    return {"rows": rows, "skipped": skipped}


# ----- 6. Verification --------------------------------------------------------------------------

MASKINGS = ("none", "causal", "key padding")


def to_torch_mha(ours):
    """nn.MultiheadAttention holding exactly our layer's weights (q, k, v stacked in in_proj)."""
    d = ours.q_proj.in_features
    ref = nn.MultiheadAttention(d, ours.n_head, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


@torch.inference_mode()
def verify_against_torch(seed=0, masking="none", d_model=32, n_head=4, batch=2, n_tokens=6):
    """Our MultiHeadAttention against nn.MultiheadAttention and F.scaled_dot_product_attention,
    all with the same weights. Returns [(comparison, max |difference|)].

    The three APIs disagree on what True means in a boolean mask: ours and F.sdpa say "may
    attend", nn.MultiheadAttention says "blocked" (attn_mask) or "is padding" (key_padding_mask).
    """
    seed = whole_number(seed, "The seed", 0, 2**31 - 1)
    if masking not in MASKINGS:
        raise ValueError(f"Unknown masking {str(masking)[:30]!r}; choose one of: {', '.join(MASKINGS)}.")
    ours = init_seeded_(MultiHeadAttention(d_model, n_head), seed)
    ref = to_torch_mha(ours)
    x = torch.randn(batch, n_tokens, d_model, generator=torch.Generator().manual_seed(seed + 1))
    mask, ref_kwargs = None, {}
    if masking == "causal":
        mask = causal_mask(n_tokens)  # (T, T)
        ref_kwargs = {"attn_mask": ~mask}
    elif masking == "key padding":
        valid = torch.arange(n_tokens) < torch.tensor([[n_tokens], [n_tokens - 2]])  # (B, T), 2 pads in row 1
        mask = key_padding_mask(valid)  # (B, 1, 1, T)
        ref_kwargs = {"key_padding_mask": ~valid}
    out, weights = ours(x, mask=mask, return_attention=True)
    ref_out, ref_weights = ref(x, x, x, need_weights=True, average_attn_weights=False, **ref_kwargs)
    q = ours.split_heads(ours.q_proj(x))  # (B, H, T, Dh)
    k, v = ours.project_kv(x)
    fused = ours.out_proj(ours.merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))
    diff = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    return [("output: ours vs nn.MultiheadAttention", diff(out, ref_out)),
            ("attention weights: ours vs nn.MultiheadAttention", diff(weights, ref_weights)),
            ("output: ours vs F.scaled_dot_product_attention", diff(out, fused))]


# ----- 7. Parameter accounting ------------------------------------------------------------------

def parameter_breakdown(model):
    """{part: parameter count} for a model built from zoo.attention's blocks.

    Modules are visited parents first, and a parameter belongs to the first module that claims it:
    an attention layer claims its q/k/v/out projections before they are reached as plain Linears,
    and a tied output projection (the translator's) is the embedding matrix, counted once. Linears
    left over are the output head; anything else lands in "other", which the zoo models never have.
    The parts add up to sum(p.numel() for p in model.parameters()).
    """
    kinds = ((nn.Embedding, "embeddings"), ((MultiHeadAttention, nn.MultiheadAttention), "attention"),
             (FeedForward, "feed-forward"), (nn.LayerNorm, "norms"), (nn.Linear, "head"))
    counts = dict.fromkeys(PARTS, 0)
    seen = set()
    for module in model.modules():
        part = next((name for cls, name in kinds if isinstance(module, cls)), None)
        if part is None:
            continue
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                counts[part] += p.numel()
    other = sum(p.numel() for p in model.parameters() if id(p) not in seen)
    if other:
        counts["other"] = other
    return counts
