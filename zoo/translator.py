"""A small English->German encoder-decoder Transformer, built from zoo.attention's blocks.

Read top to bottom: decoder block, the model (encode / decode / forward), incremental decoding with
a key/value cache, greedy and beam search, then the text-level API the app uses: translate,
explain and force_decode.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .attention import (EncoderBlock, FeedForward, MultiHeadAttention, causal_mask, dropped, key_padding_mask,
                        sinusoidal_positions)
from .hub import ZooModel, resolve_file
from .packing import PACK_MIN_ELEMENTS, linear, worth_packing

TOKENIZER_FILE = "tokenizer.json"
# Beam search ranks hypotheses by log-probability / length**LENGTH_PENALTY; 1.0 scored best on the
# Multi30k validation split among 0.3, 0.6, 1.0, 1.5, 2.0 and 3.0 (`evaluate_translator --sweep`).
LENGTH_PENALTY = 1.0


class DecoderBlock(nn.Module):
    """Pre-LN decoder block: masked self-attention, cross-attention to the encoder, feed-forward."""

    def __init__(self, d_model, n_head, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, n_head)
        self.ln3 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cross_kv, self_mask, cross_mask, past_kv=None, return_attention=False,
                self_head_mask=None, cross_head_mask=None):
        """x: (B, T_new, D) new target positions; cross_kv: the encoder's keys/values for this
        layer; past_kv: cached (k, v) of earlier target positions, each (B, H, T_past, Dh).
        Returns x, the updated self-attention (k, v) and the two attention maps (or None)."""
        q, k, v = self.self_attn.project_qkv(self.ln1(x))  # (B, H, T_new, Dh) each
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)  # (B, H, T_past + T_new, Dh)
            v = torch.cat([past_kv[1], v], dim=2)
        a, self_w = self.self_attn.attend(q, k, v, self_mask, return_attention, self_head_mask)
        x = x + dropped(a, self.drop)
        a, cross_w = self.cross_attn(self.ln2(x), mask=cross_mask, kv=cross_kv,
                                     return_attention=return_attention, head_mask=cross_head_mask)
        x = x + dropped(a, self.drop)
        x = x + dropped(self.ff(self.ln3(x)), self.drop)
        return x, (k, v), self_w, cross_w


def layer_mask(head_mask, key, layer):
    """Row `layer` of head_mask[key] ((n_layer, n_head), 1 = keep), or None when not ablating."""
    if not head_mask or head_mask.get(key) is None:
        return None
    return head_mask[key][layer]


# How much a decoding step may reuse from earlier steps (next_logits, greedy, beam_search):
#   "full":    the key/value cache: the encoder's keys/values per layer, computed once, and every
#              earlier target position's self-attention keys/values; each step feeds one new token.
#   "encoder": only the encoder's keys/values are kept; the target prefix is recomputed each step.
#   "none":    no cache: each step reruns the decoder over the whole prefix and recomputes every key
#              and value it attends to, as a decoder without a cache does.
# All three give the same tokens and logits (tested); they differ only in speed.
CACHE_MODES = ("full", "encoder", "none")


@dataclass
class DecoderState:
    """What incremental decoding carries between steps: per layer the encoder's keys/values
    (computed once) and the growing self-attention cache, plus the encoder output they came from,
    the source mask and the heads this call switches off."""

    cross_kv: list
    self_kv: list
    cross_mask: torch.Tensor | None
    memory: torch.Tensor
    length: int = 0
    head_mask: dict | None = None

    def repeat_rows(self, k):
        """Each batch row k times in a row (beam search's copies of a sentence); returns self. Called
        before any step, so the encoder's keys/values are computed once per sentence, then copied."""
        assert self.length == 0, "repeat_rows() comes before the first step"
        rows = lambda t: t.repeat_interleave(k, 0)  # noqa: E731
        self.cross_kv = [(rows(kv[0]), rows(kv[1])) for kv in self.cross_kv]
        self.memory = rows(self.memory)
        self.cross_mask = None if self.cross_mask is None else rows(self.cross_mask)
        return self

    def reorder(self, index):
        """Keep batch rows `index` (beam search picks which hypotheses survive). Only the
        self-attention cache moves: beam search never picks a row outside a sentence's own group of
        beams, whose encoder output, encoder keys/values and source mask are identical copies."""
        self.self_kv = [None if kv is None else (kv[0].index_select(0, index), kv[1].index_select(0, index))
                        for kv in self.self_kv]


def top_candidates(scores, n, chunk=100):
    """scores.topk(n, dim=1) for (B, N) scores, faster when N is large: beam search ranks
    beam_size * vocab_size candidates per sentence each step (40,000 here: 34-41 us against 70-110).

    The n chunks with the largest maxima hold every top-n entry, since any entry of another chunk is
    beaten by those n maxima; so only n * chunk entries are searched. Equal scores may come back in
    another order than topk's."""
    b, total = scores.shape
    if total % chunk or total // chunk <= n:
        return scores.topk(n, dim=1)
    chunks = scores.view(b, total // chunk, chunk)  # (B, N / chunk, chunk)
    best = chunks.amax(-1).topk(n, dim=1).indices  # (B, n): the chunks that hold the top n
    picked = chunks.gather(1, best[:, :, None].expand(-1, -1, chunk)).view(b, n * chunk)  # (B, n * chunk)
    values, at = picked.topk(n, dim=1)  # (B, n)
    return values, best.gather(1, at // chunk) * chunk + at % chunk


class TransformerTranslator(ZooModel, license="cc-by-nc-4.0", language=["en", "de"],
                            tags=["translation", "multi30k"]):
    """Encoder-decoder Transformer with one embedding matrix shared by source, target and output.

    The output projection *is* the embedding matrix (weight tying): a joint EN+DE subword
    vocabulary makes the three roles the same lookup table, and it saves vocab_size * d_model
    parameters.
    """

    def __init__(self, vocab_size: int = 8000, d_model: int = 256, n_head: int = 4,
                 n_enc_layer: int = 3, n_dec_layer: int = 3, d_ff: int = 1024,
                 dropout: float = 0.1, max_len: int = 128, pad_id: int = 0, bos_id: int = 1,
                 eos_id: int = 2):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        # Positions up to max_len for the source and the target; not a parameter, not saved.
        self.register_buffer("pe", sinusoidal_positions(max_len + 1, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(EncoderBlock(d_model, n_head, d_ff, dropout) for _ in range(n_enc_layer))
        self.enc_ln = nn.LayerNorm(d_model)
        self.decoder = nn.ModuleList(DecoderBlock(d_model, n_head, d_ff, dropout) for _ in range(n_dec_layer))
        self.dec_ln = nn.LayerNorm(d_model)
        self.tokenizer = None  # set by load_extras / attach_tokenizer
        self.packed_head = None  # the tied output projection laid out for oneDNN, set by pack()

    # ----- the network -------------------------------------------------------------------------
    def embed_tokens(self, ids, offset=0):
        """Scaled embedding + sinusoidal position, positions starting at `offset`."""
        x = self.embed(ids) * math.sqrt(self.d_model) + self.pe[offset: offset + ids.size(1)]  # (B, T, D)
        return dropped(x, self.drop)

    def encode(self, src, return_attention=False, head_mask=None):
        """src (B, S) ids, right-padded -> memory (B, S, D), its key mask (B, 1, 1, S) and the
        encoder self-attention maps (tuple of (B, H, S, S), or empty).

        head_mask, here and below: None, or {"encoder" | "decoder_self" | "cross": (n_layer, n_head)
        tensor, 1 = keep, 0 = switch the head off} for this call only."""
        mask = key_padding_mask(src != self.pad_id)
        x = self.embed_tokens(src)
        maps = []
        for i, block in enumerate(self.encoder):
            x, w = block(x, mask=mask, return_attention=return_attention,
                         head_mask=layer_mask(head_mask, "encoder", i))
            maps.append(w)
        return self.enc_ln(x), mask, tuple(maps) if return_attention else ()

    def encoder_kv(self, memory):
        """Each decoder layer's cross-attention keys and values of the encoder output memory."""
        return [block.cross_attn.project_kv(memory) for block in self.decoder]

    def start_state(self, memory, src_mask, head_mask=None):
        cross_kv = self.encoder_kv(memory)
        if src_mask.all():  # no padding in the batch: masking would change nothing
            src_mask = None
        return DecoderState(cross_kv, [None] * len(self.decoder), src_mask, memory, head_mask=head_mask)

    def decode(self, tgt, state, return_attention=False, last_only=False):
        """Run the decoder on new target ids (B, T_new) that follow the cached ones.

        Returns logits (B, T_new, V), or (B, 1, V) for the last position only with last_only, and,
        when asked, the self- and cross-attention maps per layer ((B, H, T_new, T_total) and
        (B, H, T_new, S)). Updates `state` in place.
        """
        t_new, past = tgt.size(1), state.length
        # New queries see every cached key and the new keys up to themselves; a single new token
        # (incremental decoding) may see them all, so it needs no mask.
        self_mask = causal_mask(past + t_new, tgt.device)[past:] if t_new > 1 else None  # (T_new, T_total)
        x = self.embed_tokens(tgt, offset=past)
        self_maps, cross_maps = [], []
        for i, block in enumerate(self.decoder):
            x, state.self_kv[i], sw, cw = block(
                x, state.cross_kv[i], self_mask, state.cross_mask, past_kv=state.self_kv[i],
                return_attention=return_attention, self_head_mask=layer_mask(state.head_mask, "decoder_self", i),
                cross_head_mask=layer_mask(state.head_mask, "cross", i))
            self_maps.append(sw)
            cross_maps.append(cw)
        state.length += t_new
        if last_only:
            x = x[:, -1:]  # (B, 1, D): searching needs only the next token's distribution
        # Tied output projection: the embedding matrix, (B, T_new or 1, D) -> (B, T_new or 1, V).
        logits = linear(self.dec_ln(x), self.embed.weight, packed=self.packed_head)
        return logits, tuple(self_maps), tuple(cross_maps)

    def forward(self, src, tgt_in):
        """Teacher forcing: src (B, S), tgt_in (B, T) starting with <s> -> logits (B, T, V)."""
        memory, src_mask = self.encode(src)[:2]
        return self.decode(tgt_in, self.start_state(memory, src_mask))[0]

    def pack(self, min_elements=PACK_MIN_ELEMENTS):
        """Pack the Linears and the tied output projection, the largest product of a decoding step
        (zoo.packing); returns self."""
        self.packed_head = worth_packing(self.embed.weight.numel(), min_elements)
        return super().pack(min_elements)

    # ----- search ------------------------------------------------------------------------------
    def max_target_len(self, src_len):
        """Output length cap tied to the source: 1.5 x source tokens + 10, within max_len."""
        return min(self.max_len, int(1.5 * src_len) + 10)

    def next_logits(self, ys, state, cache="full"):
        """Logits (B, V) for the token after ys (B, T); `cache` is one of CACHE_MODES. With the full
        cache only the last token is fed (its keys/values are appended to the cache); otherwise the
        whole prefix is run again from a fresh state."""
        if cache == "full":
            return self.decode(ys[:, -1:], state, last_only=True)[0][:, -1]
        if cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {', '.join(CACHE_MODES)}; got {cache!r}")
        cross_kv = state.cross_kv if cache == "encoder" else self.encoder_kv(state.memory)
        fresh = DecoderState(cross_kv, [None] * len(self.decoder), state.cross_mask, state.memory,
                             head_mask=state.head_mask)
        return self.decode(ys, fresh, last_only=True)[0][:, -1]

    @torch.inference_mode()
    def greedy(self, src, cache="full", head_mask=None):
        """Greedy search. Returns the ids (B, T) without <s> (stopping after </s>) and the
        per-step logits (B, T, V). `cache`: see CACHE_MODES."""
        memory, src_mask = self.encode(src, head_mask=head_mask)[:2]
        limit = self.max_target_len(int((src != self.pad_id).sum(1).max()))
        ys = torch.full((src.size(0), 1), self.bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        state, all_logits = self.start_state(memory, src_mask, head_mask), []
        for _ in range(limit):
            logits = self.next_logits(ys, state, cache)
            nxt = logits.argmax(-1).masked_fill(done, self.pad_id)
            all_logits.append(logits)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == self.eos_id
            if done.all():
                break
        return ys[:, 1:], torch.stack(all_logits, dim=1)

    @torch.inference_mode()
    def beam_search(self, src, beam_size=5, length_penalty=LENGTH_PENALTY, cache="full", head_mask=None):
        """Batched beam search with the key/value cache.

        Hypotheses are ranked by log-probability / length**length_penalty. Each sentence stops
        once it has `beam_size` finished hypotheses, or at max_target_len(its source length).
        `cache` (see CACHE_MODES) changes only the speed (for tests and benchmarks).
        Returns a list of id lists (no <s>, no </s>).
        """
        b, k = src.size(0), beam_size
        memory, src_mask = self.encode(src, head_mask=head_mask)[:2]
        src_lens = (src != self.pad_id).sum(1).tolist()
        limits = [self.max_target_len(n) for n in src_lens]
        state = self.start_state(memory, src_mask, head_mask).repeat_rows(k)
        ys = torch.full((b * k, 1), self.bos_id, dtype=torch.long, device=src.device)
        scores = torch.zeros(b, k, device=src.device)
        scores[:, 1:] = -math.inf  # all beams start identical: expand only the first
        finished = [[] for _ in range(b)]  # (normalised score, ids)
        done = [False] * b
        norm = lambda logp, n: logp / n**length_penalty  # noqa: E731
        for step in range(max(limits)):
            logp = self.next_logits(ys, state, cache).float().log_softmax(-1)  # (B*K, V)
            vocab = logp.size(-1)
            cand = (scores.view(-1, 1) + logp).view(b, k * vocab)
            top_scores, top_ids = top_candidates(cand, 2 * k)  # (B, 2K): enough to refill K beams
            next_rows, next_tok, next_scores = [], [], []
            for i in range(b):
                rows, toks, scs = [], [], []
                at_limit = step + 1 >= limits[i]
                for s, idx in zip(top_scores[i].tolist(), top_ids[i].tolist()):
                    beam, tok = divmod(idx, vocab)
                    if done[i] or s == -math.inf:
                        break
                    if tok == self.eos_id or at_limit:
                        if len(finished[i]) < k:
                            hyp = ys[i * k + beam, 1:].tolist() + ([] if tok == self.eos_id else [tok])
                            finished[i].append((norm(s, step + 1), hyp))
                    else:
                        rows.append(i * k + beam), toks.append(tok), scs.append(s)
                    if len(rows) == k:
                        break
                # As in fairseq: a sentence is settled once it has K finished hypotheses.
                done[i] = done[i] or at_limit or not scs or len(finished[i]) >= k
                while len(rows) < k:  # pad dead slots: repeat a row with score -inf
                    rows.append(i * k), toks.append(self.pad_id), scs.append(-math.inf)
                next_rows += rows
                next_tok += toks
                next_scores += scs
            if all(done):
                break
            index = torch.tensor(next_rows, device=src.device)
            state.reorder(index)
            ys = torch.cat([ys.index_select(0, index), torch.tensor(next_tok, device=src.device)[:, None]], 1)
            scores = torch.tensor(next_scores, device=src.device).view(b, k)
        return [max(f, key=lambda t: t[0])[1] if f else [] for f in finished]

    def strip(self, ids):
        """Cut a generated id list at </s> and drop padding."""
        out = []
        for t in ids:
            if t == self.eos_id:
                break
            if t != self.pad_id:
                out.append(t)
        return out

    # ----- text API ----------------------------------------------------------------------------
    def load_extras(self, model_id, **hub_kwargs):
        from tokenizers import Tokenizer

        self.attach_tokenizer(Tokenizer.from_file(resolve_file(model_id, TOKENIZER_FILE, **hub_kwargs)))

    def attach_tokenizer(self, tokenizer):
        self.tokenizer = tokenizer
        return self

    def _save_pretrained(self, save_directory):
        super()._save_pretrained(save_directory)
        self.tokenizer.save(str(save_directory / TOKENIZER_FILE))

    def encode_text(self, text, role="input"):
        """Text -> ids (no specials). Refuses empty text and text longer than the model takes."""
        text = unicodedata.normalize("NFC", text).strip()
        if not text:
            language = "a German" if role == "reference" else "an English"
            raise ValueError(f"The {role} is empty: type {language} sentence.")
        ids = self.tokenizer.encode(text).ids
        if len(ids) + 1 > self.max_len:
            raise ValueError(f"The {role} is {len(ids)} subword tokens long; this model takes at most "
                             f"{self.max_len - 1}. Shorten it or split it into sentences.")
        return ids

    def batch_source(self, texts):
        rows = [self.encode_text(t) + [self.eos_id] for t in texts]
        src = torch.full((len(rows), max(map(len, rows))), self.pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            src[i, : len(r)] = torch.tensor(r)
        return src.to(self.embed.weight.device)

    def decode_ids(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_strings(self, ids):
        """Readable token texts: the bytes each id stands for, a leading space shown as '▁'."""
        out = []
        for i in ids:
            if i in (self.bos_id, self.eos_id, self.pad_id):
                out.append(self.tokenizer.id_to_token(i))
                continue
            s = self.tokenizer.decode([i], skip_special_tokens=False)
            out.append("▁" + s[1:] if s.startswith(" ") else s)
        return out

    def translate(self, texts, beam_size=5, length_penalty=LENGTH_PENALTY, batch_size=64, head_mask=None):
        """English sentences -> German sentences (detokenized text)."""
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single one in a list")
        # Sort by length so each batch pads little; restore the order at the end.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [None] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            hyps = self.beam_search(self.batch_source([texts[i] for i in chunk]), beam_size, length_penalty,
                                    head_mask=head_mask)
            for i, h in zip(chunk, hyps):
                out[i] = self.decode_ids(h)
        return out

    @torch.inference_mode()
    def teacher_force(self, src_ids, out_ids, head_mask=None):
        """One pass with the output fed back in: per-step distributions and every attention map.

        src_ids and out_ids are id lists, out_ids ending with </s>. Row t of the decoder maps is
        the step that produced out_ids[t]."""
        src = torch.tensor([src_ids], device=self.embed.weight.device)
        tgt_in = torch.tensor([[self.bos_id] + out_ids[:-1]], device=src.device)
        memory, src_mask, enc_maps = self.encode(src, return_attention=True, head_mask=head_mask)
        logits, self_maps, cross_maps = self.decode(tgt_in, self.start_state(memory, src_mask, head_mask),
                                                    return_attention=True)
        stack = lambda maps: torch.stack([m[0] for m in maps]).float().cpu().numpy()  # noqa: E731
        probs = logits[0].float().softmax(-1).cpu()  # (T_tgt, V)
        return probs, stack(enc_maps), stack(self_maps), stack(cross_maps)

    def explain(self, text, beam_size=5, length_penalty=LENGTH_PENALTY, top_k=5, head_mask=None):
        """Translate one sentence and return everything needed to show how.

        Keys: source_tokens, target_tokens (the output, ending with </s>), decoder_input_tokens (what
        the decoder read at each step: <s> then the output shifted by one: the keys of its
        self-attention), translation, cross_attention (n_layer, n_head, T_tgt, T_src),
        decoder_self_attention (n_layer, n_head, T_tgt, T_tgt), encoder_self_attention
        (n_layer, n_head, T_src, T_src),
        steps: for each output position the top_k candidates [(token, prob)] and the chosen
        token's probability.
        """
        src_ids = self.encode_text(text) + [self.eos_id]
        hyp = self.beam_search(self.batch_source([text]), beam_size, length_penalty, head_mask=head_mask)[0]
        out_ids = hyp + [self.eos_id]
        probs, enc, dec_self, cross = self.teacher_force(src_ids, out_ids, head_mask)
        top_p, top_i = probs.topk(top_k, dim=-1)
        steps = []
        for t, tok in enumerate(out_ids):
            cands = list(zip(self.token_strings(top_i[t].tolist()), top_p[t].tolist()))
            steps.append({"token": self.token_strings([tok])[0], "prob": probs[t, tok].item(),
                          "candidates": cands})
        return {
            "source_tokens": self.token_strings(src_ids),
            "target_tokens": self.token_strings(out_ids),
            "decoder_input_tokens": self.token_strings([self.bos_id] + out_ids[:-1]),
            "translation": self.decode_ids(hyp),
            "cross_attention": cross,
            "decoder_self_attention": dec_self,
            "encoder_self_attention": enc,
            "steps": steps,
        }

    def force_decode(self, text, reference, head_mask=None):
        """Feed a given German `reference` by teacher forcing: how likely the model finds each of
        its tokens, and where it looks while reading it.

        Keys: source_tokens, target_tokens (reference tokens + </s>), token_probs (T_tgt,),
        cross_attention (n_layer, n_head, T_tgt, T_src), log_prob (sum) and perplexity.
        """
        src_ids = self.encode_text(text) + [self.eos_id]
        out_ids = self.encode_text(reference, role="reference") + [self.eos_id]
        probs, _, _, cross = self.teacher_force(src_ids, out_ids, head_mask)
        token_probs = probs[torch.arange(len(out_ids)), torch.tensor(out_ids)].numpy()
        log_prob = float(np.log(np.maximum(token_probs, 1e-30)).sum())
        return {
            "source_tokens": self.token_strings(src_ids),
            "target_tokens": self.token_strings(out_ids),
            "token_probs": token_probs,
            "cross_attention": cross,
            "log_prob": log_prob,
            "perplexity": math.exp(-log_prob / len(out_ids)),
        }
