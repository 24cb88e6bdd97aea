"""Decoding: turning the translator's next-token distributions into sentences.

Greedy search and beam search, over any model with the translator's encode / cross_kv / decode /
project. Both run the decoder one step at a time. With the key/value cache (use_cache=True, the
default) a step feeds only the newest token: the decoder keeps every earlier position's
self-attention keys and values, and the encoder output's cross-attention keys and values are
computed once per sentence. Without it, each step reruns the decoder over the whole prefix and
recomputes every key and value it attends to, as a decoder without a cache does. Both give the
same tokens (tested); they differ in speed only (benchmarks/translator.py measures by how much).
"""

from __future__ import annotations

import math

import torch

# Beam search ranks hypotheses by log-probability / length**LENGTH_PENALTY; 1.0 scored best on the
# Multi30k validation split (`evaluate_translator --sweep`, in the translator's model card).
LENGTH_PENALTY = 1.0


class Decoder:
    """Step-by-step decoding of a batch of encoded sentences, one row per hypothesis."""

    def __init__(self, model, src, use_cache=True, head_mask=None):
        self.model, self.use_cache, self.head_mask = model, use_cache, head_mask
        self.memory, mask = model.encode(src, head_mask=head_mask)[:2]
        self.cross_mask = None if mask.all() else mask  # without padding the mask would change nothing
        self.cross = model.cross_kv(self.memory) if use_cache else None
        self.past = None  # the cache: per decoder layer, the self-attention (k, v) of the positions so far

    def repeat(self, k):
        """Each sentence's row k times in a row, for beam search's k hypotheses (before the first
        step, so the encoder and its keys/values run once per sentence). Returns self."""
        rows = lambda t: t.repeat_interleave(k, 0)  # noqa: E731
        self.memory = rows(self.memory)
        self.cross_mask = None if self.cross_mask is None else rows(self.cross_mask)
        if self.cross is not None:
            self.cross = [(rows(kk), rows(vv)) for kk, vv in self.cross]
        return self

    def next_logits(self, ys):
        """Logits (B, V) of the token after each row of ys (B, T), which starts with <s>."""
        model = self.model
        if self.use_cache:
            h, self.past = model.decode(ys[:, -1:], self.cross, self.cross_mask, self.past,
                                        head_mask=self.head_mask)[:2]
        else:
            h = model.decode(ys, model.cross_kv(self.memory), self.cross_mask, head_mask=self.head_mask)[0]
        return model.project(h[:, -1])

    def keep(self, rows):
        """Continue with hypotheses `rows` (B,) only, in that order. Only the self-attention cache
        moves: beam search picks rows within a sentence's own group, whose encoder output, keys,
        values and mask are identical copies."""
        if self.past is not None:
            self.past = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.past]


def source_lengths(model, src):
    return (src != model.pad_id).sum(1).tolist()


@torch.inference_mode()
def greedy(model, src, use_cache=True, head_mask=None):
    """Greedy search: the ids (B, T) without <s> (padding after </s>) and the per-step logits (B, T, V)."""
    decoder = Decoder(model, src, use_cache, head_mask)
    ys = torch.full((src.size(0), 1), model.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    all_logits = []
    for _ in range(model.max_target_len(max(source_lengths(model, src)))):
        logits = decoder.next_logits(ys)
        nxt = logits.argmax(-1).masked_fill(done, model.pad_id)
        all_logits.append(logits)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == model.eos_id
        if done.all():
            break
    return ys[:, 1:], torch.stack(all_logits, dim=1)


@torch.inference_mode()
def beam_search(model, src, beam_size=5, length_penalty=LENGTH_PENALTY, use_cache=True, head_mask=None):
    """Batched beam search. Returns a list of id lists (no <s>, no </s>), one per sentence.

    Hypotheses are ranked by log-probability / length**length_penalty. As in fairseq, a sentence
    is settled once it has `beam_size` finished hypotheses, or at max_target_len(its length)."""
    b, k = src.size(0), beam_size
    limits = [model.max_target_len(n) for n in source_lengths(model, src)]
    decoder = Decoder(model, src, use_cache, head_mask).repeat(k)
    ys = torch.full((b * k, 1), model.bos_id, dtype=torch.long, device=src.device)
    scores = torch.full((b, k), -math.inf, device=src.device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    finished = [[] for _ in range(b)]  # per sentence: (normalised score, ids)
    done = [False] * b
    for step in range(max(limits)):
        logp = decoder.next_logits(ys).float().log_softmax(-1)  # (B*K, V)
        vocab = logp.size(-1)
        # 2K candidates per sentence are enough to refill K beams after some of them finish.
        top_scores, top_ids = (scores.view(-1, 1) + logp).view(b, k * vocab).topk(2 * k, dim=1)  # (B, 2K)
        rows, tokens, kept = [], [], []
        for i in range(b):
            at_limit = step + 1 >= limits[i]
            candidates = [] if done[i] else zip(top_scores[i].tolist(), top_ids[i].tolist(), strict=True)
            beams = next_beams(model, i, k, vocab, candidates, ys, finished[i], step, at_limit, length_penalty)
            done[i] = done[i] or at_limit or not beams or len(finished[i]) >= k
            beams += [(i * k, model.pad_id, -math.inf)] * (k - len(beams))  # dead slots: a row at -inf
            for row, token, score in beams:
                rows.append(row), tokens.append(token), kept.append(score)
        if all(done):
            break
        index = torch.tensor(rows, device=src.device)
        decoder.keep(index)
        ys = torch.cat([ys.index_select(0, index), torch.tensor(tokens, device=src.device)[:, None]], 1)
        scores = torch.tensor(kept, device=src.device).view(b, k)
    return [max(f, key=lambda t: t[0])[1] if f else [] for f in finished]


def next_beams(model, i, k, vocab, candidates, ys, finished, step, at_limit, length_penalty):
    """Sentence i's beams for the next step, from its candidates (score, beam * vocab + token),
    best first: up to k (row of ys, token, score). A candidate that ends the sentence (</s>, or
    any token at the length limit) joins `finished` instead, while it has room."""
    beams = []
    for score, idx in candidates:
        if score == -math.inf:
            break
        beam, token = divmod(idx, vocab)
        if token == model.eos_id or at_limit:
            if len(finished) < k:
                hyp = ys[i * k + beam, 1:].tolist() + ([] if token == model.eos_id else [token])
                finished.append((score / (step + 1) ** length_penalty, hyp))
        else:
            beams.append((i * k + beam, token, score))
        if len(beams) == k:
            break
    return beams
