"""The playground: design a tiny Transformer, train it while you watch, and test what it learnt.

Tasks are generated on the fly from the digits 0-9 (TASKS). A Design holds every choice (task,
positions, mask, size, budget, seed, and optionally post-LN, a learning rate, one of the seed
article's mistakes, variable lengths); check() refuses what the playground cannot train, in words.
fit_steps() is the training loop, the one the zoo's sorters are trained with too
(training/train_sorter.py): AdamW, a short warmup to the peak learning rate, cosine decay to zero,
gradient clipping at norm 1, fresh sequences every step. watch() runs it and reports every few
steps: the curves, every head's attention on a probe input and the current predictions, so a caller
can show training as it happens and stop whenever it likes, keeping the model as it is.
evaluate() scores a model on fresh sequences, by length and, for a causal model, step by step.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from .attention import MISTAKES
from .sorter import EVAL_SEED, N_DIGITS, POSITIONS, DigitTransformer, sorting_ceiling_without_positions

TASKS = {
    "sort": "output i is the i-th smallest digit",
    "reverse": "output i is input n-1-i",
    "histogram": "output i is how many times input i's digit occurs in the sequence",
    "previous": "output i is input i-1, and 0 at position 0",
}
NORMS = ("pre", "post")
PAD = N_DIGITS  # the padding token, after the ten digits
IGNORE = -100  # the loss and the accuracy skip targets at padding
LIMITS = {"n_layer": (1, 4), "n_head": (1, 4), "d_model": (16, 128), "seq_len": (4, 16), "steps": (1, 3000),
          "seed": (0, 2**31 - 1)}
LR_RANGE = (1e-4, 5e-2)
MAX_PARAMETERS = 500_000
MAX_SECONDS = 90  # a run stops here, whatever its budget: the server has two cores for everyone
BATCH = 128
WARMUP = 100


@dataclass(frozen=True)
class Design:
    """Everything a playground run is made of. Defaults: the seed article's sorter with the
    shipped recipe."""

    task: str = "sort"
    positions: str = "sinusoidal"
    causal: bool = False
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    seq_len: int = 8
    steps: int = 1500
    seed: int = 0
    norm: str = "pre"
    lr: float = 5e-3
    mistake: str = "none"
    variable_lengths: bool = False

    def n_out(self):
        """Output classes: digits, or counts 0..2n for the histogram (so longer inputs fit)."""
        return 2 * self.seq_len + 1 if self.task == "histogram" else N_DIGITS

    def model_config(self):
        # A padding token only when there is padding: the sorter preset then has the article's 101,258.
        return {"n_in": N_DIGITS + 1 if self.variable_lengths else N_DIGITS, "n_out": self.n_out(),
                "seq_len": self.seq_len, "d_model": self.d_model,
                "n_head": self.n_head, "n_layer": self.n_layer, "d_ff": 4 * self.d_model,
                "positions": self.positions, "causal": self.causal, "norm": self.norm, "mistake": self.mistake,
                "pad_id": PAD if self.variable_lengths else None}

    def build(self):
        """The untrained model, initialised from the design's seed (without touching anyone else's
        random numbers)."""
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            return DigitTransformer(**self.model_config())

    def check(self):
        """self, or a ValueError that says what is wrong and what is accepted."""
        for name, choices in (("task", TASKS), ("positions", POSITIONS), ("norm", NORMS), ("mistake", MISTAKES)):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}; got {getattr(self, name)!r}.")
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name} must be a whole number from {lo} to {hi}; got {value!r}.")
        if not (isinstance(self.lr, (int, float)) and LR_RANGE[0] <= self.lr <= LR_RANGE[1]):
            raise ValueError(f"The learning rate must be from {LR_RANGE[0]:g} to {LR_RANGE[1]:g}; got {self.lr!r}.")
        self.check_shape()
        with torch.device("meta"):
            n = sum(p.numel() for p in DigitTransformer(**self.model_config()).parameters())
        if n > MAX_PARAMETERS:
            raise ValueError(f"This design has {n:,} parameters; the playground trains at most {MAX_PARAMETERS:,}. "
                             "Use fewer layers or a smaller d_model.")
        return self

    def check_shape(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model must be divisible by the number of heads: {self.d_model} is not divisible "
                             f"by {self.n_head}.")
        if self.positions == "rotary" and (self.d_model // self.n_head) % 2:
            raise ValueError(f"Rotary positions rotate pairs of dimensions, so the head size (d_model / heads = "
                             f"{self.d_model // self.n_head}) must be even.")
        if self.mistake == "mask-query-axis" and not (self.causal or self.variable_lengths):
            raise ValueError("The mask on the wrong axis only matters where there is a mask: turn on the causal "
                             "mask or variable lengths (padding) to try it.")


PRESETS = {
    "the seed article's sorter": Design(),
    "its twin without positions": Design(positions="none"),
    "histogram without positions": Design(task="histogram", positions="none"),
    "previous, causal, no positions": Design(task="previous", positions="none", causal=True),
}


# ----- data ----------------------------------------------------------------------------------------

def targets(task, x, valid):
    """Each task's answer for digits x (B, T), padded with PAD where valid (B, T) is False; IGNORE
    at padding."""
    b, t = x.shape
    if task == "sort":
        y = x.sort(dim=1).values  # padding (PAD = 10) sorts after every digit
    elif task == "reverse":
        lengths = valid.sum(1, keepdim=True)  # (B, 1)
        y = x.gather(1, (lengths - 1 - torch.arange(t)).clamp(min=0))  # (B, T): x[n - 1 - i]
    elif task == "histogram":
        y = ((x[:, :, None] == x[:, None, :]) & valid[:, None, :]).sum(-1)  # (B, T): count of x[i]
    else:  # previous
        y = torch.cat([torch.zeros(b, 1, dtype=x.dtype), x[:, :-1]], dim=1)
    return y.masked_fill(~valid, IGNORE)


def batch(task, n, seq_len, generator, variable_lengths=False):
    """n fresh sequences (x, y): digits drawn uniformly; with variable_lengths each row has 2..seq_len
    digits and is padded to seq_len."""
    x = torch.randint(0, N_DIGITS, (n, seq_len), generator=generator)
    valid = torch.ones(n, seq_len, dtype=torch.bool)
    if variable_lengths:
        lengths = torch.randint(2, seq_len + 1, (n, 1), generator=generator)
        valid = torch.arange(seq_len) < lengths
        x = x.masked_fill(~valid, PAD)
    return x, targets(task, x, valid)


def positionless_ceiling(task, seq_len, samples=20_000, seed=0):
    """The best per-position accuracy of any model without positions and without a mask, or None
    where such a model can solve the task (histogram). Such a model is permutation-equivariant:
    output i can only be a function of input i's digit and the multiset of all digits, so its best
    guess is the most likely target given those two. sort: exact (zoo.sorter); reverse and previous:
    that best guess averaged over `samples` random sequences (about +-0.003)."""
    if task == "histogram":
        return None
    if task == "sort":
        return sorting_ceiling_without_positions(seq_len)
    x = torch.randint(0, N_DIGITS, (samples, seq_len), generator=torch.Generator().manual_seed(seed))
    counts = F.one_hot(x, N_DIGITS).sum(1)  # (S, 10): the multiset
    others = counts[:, None, :] - F.one_hot(x, N_DIGITS)  # (S, T, 10): the multiset without input i
    if task == "reverse":  # the mirror is another position, uniformly, or the same one for odd n's middle
        chances = counts[:, None, :].float() / seq_len if seq_len % 2 else others.float() / (seq_len - 1)
    else:  # previous: position 0 (1 in n) wants 0, any other one a uniformly drawn other position's digit
        chances = (others.float() + F.one_hot(torch.tensor(0), N_DIGITS)) / seq_len
    return chances.max(-1).values.mean().item()


# ----- training ------------------------------------------------------------------------------------

def lr_factor(step, steps, warmup=WARMUP):
    """The shipped schedule: linear warmup over `warmup` steps, then cosine decay to zero."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def fit_steps(model, design, generator, batch_size=BATCH, warmup=WARMUP):
    """Train `model` in place with the shipped recipe; yields (step, loss tensor) after each update.
    The caller decides when to stop; the model is left in eval mode by whoever stops."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=design.lr, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, design.steps, min(warmup, design.steps)))
    for step in range(design.steps):
        model.train()
        x, y = batch(design.task, batch_size, design.seq_len, generator, design.variable_lengths)
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        yield step, loss


@dataclass
class Progress:
    """What watch() reports: the run so far and the model's view of the probe input right now."""

    step: int
    steps: int
    seconds: float
    loss: list  # [(step, training loss)]
    accuracy: list  # [(step, per-position accuracy on a fixed check batch)]
    probe_maps: np.ndarray  # (n_layer, n_head, T, T)
    probe_predictions: list
    probe_targets: list
    done: bool = False
    stopped_by_time: bool = False


def probe_view(model, design, probe):
    """Every head's attention on the probe (a list of digits), the predictions and the answers."""
    x = torch.tensor([probe])
    with torch.inference_mode():
        logits, maps = model(x, return_attention=True)
    y = targets(design.task, x, torch.ones_like(x, dtype=torch.bool))
    return torch.stack([m[0] for m in maps]).numpy(), logits[0].argmax(-1).tolist(), y[0].tolist()


def watch(design, probe, every=100, max_seconds=MAX_SECONDS):
    """Train a fresh model for `design`, yielding (model, Progress) every `every` steps and at the
    end. Deterministic for a given design. The run stops at max_seconds of wall time."""
    design.check()
    model, generator = design.build(), torch.Generator().manual_seed(design.seed)
    check_x, check_y = batch(design.task, 500, design.seq_len, torch.Generator().manual_seed(EVAL_SEED))
    loss_curve, acc_curve, start = [], [], time.monotonic()

    def report(step, done=False, stopped=False):
        model.eval()
        with torch.inference_mode():
            correct = (model(check_x).argmax(-1) == check_y)[check_y != IGNORE]
        acc_curve.append((step, round(correct.float().mean().item(), 4)))
        maps, predictions, answers = probe_view(model, design, probe)
        return model, Progress(step, design.steps, time.monotonic() - start, loss_curve, acc_curve, maps,
                               predictions, answers, done, stopped)

    yield report(0)
    step = -1
    for step, loss in fit_steps(model, design, generator):
        if step % 10 == 0 or step == design.steps - 1:
            loss_curve.append((step + 1, round(loss.item(), 4)))
        if time.monotonic() - start > max_seconds:
            yield report(step + 1, done=True, stopped=True)
            return
        if (step + 1) % every == 0 and step + 1 < design.steps:
            yield report(step + 1)
    yield report(step + 1, done=True)


# ----- evaluation ----------------------------------------------------------------------------------

@torch.inference_mode()
def accuracy(model, x, y):
    """(per-position accuracy, whole-sequence accuracy) over the targets that are not IGNORE."""
    keep = y != IGNORE
    correct = (model(x).argmax(-1) == y) | ~keep
    return correct[keep].float().mean().item(), correct.all(1).float().mean().item()


@torch.inference_mode()
def step_by_step(model, x, y):
    """Accuracy when each position is predicted from the inputs up to it only, as a causal model is
    used when it generates: a correctly masked model scores the same as on the whole input; one that
    relied on later inputs (the mask on the wrong axis) does not."""
    predictions = torch.stack([model(x[:, : i + 1])[:, -1].argmax(-1) for i in range(x.size(1))], dim=1)
    correct = predictions == y
    return correct.float().mean().item(), correct.all(1).float().mean().item()


def evaluate(model, design, n=2000, per_length=500):
    """The trained model on fresh sequences (their own seed): per-position and whole-sequence
    accuracy at the trained length, the ceiling without positions where there is one, accuracy by
    length from 2 to twice the trained length, and step by step for a causal model."""
    model.eval()
    g = torch.Generator().manual_seed(EVAL_SEED + 1)
    x, y = batch(design.task, n, design.seq_len, g)
    per_position, whole = accuracy(model, x, y)
    lengths = {}
    for length in range(2, 2 * design.seq_len + 1):
        xl, yl = batch(design.task, per_length, length, g)
        lengths[length] = round(accuracy(model, xl, yl)[0], 4)
    result = {"design": asdict(design), "parameters": model.num_parameters(), "sequences": n,
              "per_position_accuracy": round(per_position, 4), "sequence_accuracy": round(whole, 4),
              "accuracy_by_length": lengths}
    if design.positions == "none" and not design.causal:
        ceiling = positionless_ceiling(design.task, design.seq_len)
        result["ceiling_without_positions"] = None if ceiling is None else round(ceiling, 4)
    if design.causal:
        pos, seq = step_by_step(model, x, y)
        result["step_by_step"] = {"per_position_accuracy": round(pos, 4), "sequence_accuracy": round(seq, 4)}
    return result


def parse_probe(text, design):
    """Typed digits -> a list of ints the trained model can read (1 to 2 x its length)."""
    digits = [c for c in str(text) if not c.isspace() and c != ","]
    if not digits or len(str(text)) > 200 or any(not (c.isascii() and c.isdigit()) for c in digits):
        raise ValueError("Type digits 0-9 (spaces or commas between them are fine), e.g. 7 2 9 2 5 0 8 3.")
    if len(digits) > 2 * design.seq_len:
        raise ValueError(f"Got {len(digits)} digits; this model reads at most {2 * design.seq_len} "
                         f"(twice the {design.seq_len} it was trained on).")
    return [int(c) for c in digits]


def default_probe(design):
    """The article's 7 2 9 2 5 0 8 3 for 8 digits, else a fixed random sequence of the length."""
    if design.seq_len == 8:
        return [7, 2, 9, 2, 5, 0, 8, 3]
    return torch.randint(0, N_DIGITS, (design.seq_len,), generator=torch.Generator().manual_seed(1)).tolist()


def design_from(values):
    """A Design from loosely typed values (sliders send floats): whole numbers become ints."""
    fields = {k: (int(v) if isinstance(v, float) and v.is_integer() and k in LIMITS else v) for k, v in values.items()}
    return replace(Design(), **fields)
