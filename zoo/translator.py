"""A small English->German encoder-decoder Transformer, built from zoo.attention's blocks.

Read top to bottom: the decoder block, the network (embed, encode, decode, forward), then the text
API the app uses (tokenizer, translate, explain, force_decode). The search that turns next-token
distributions into sentences, and the key/value cache it uses, live in zoo.decoding.
"""

from __future__ import annotations

import math
import unicodedata

import numpy as np
import torch
from torch import nn

from . import decoding
from .attention import (
    EncoderBlock,
    FeedForward,
    MultiHeadAttention,
    causal_mask,
    key_padding_mask,
    sinusoidal_positions,
)
from .hub import ZooModel, resolve_file

TOKENIZER_FILE = "tokenizer.json"
HEAD_MASK_KEYS = ("encoder", "decoder_self", "cross")  # the three kinds of attention a head_mask can switch off


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

    def forward(self, x, cross_kv, cross_mask=None, self_mask=None, past_kv=None, return_attention=False,
                head_masks=(None, None)):
        """x: (B, T_new, D), the new target positions; cross_kv: the encoder output's keys and
        values for this layer; past_kv: the keys and values of earlier target positions (a cache),
        each (B, H, T_past, Dh), or None. head_masks: (self, cross), each (H,) or None.

        Returns x, this layer's self-attention keys and values over all positions so far (what a
        cache keeps for the next step), and the self- and cross-attention maps (or None)."""
        h = self.ln1(x)
        k, v = self.self_attn.project_kv(h)  # (B, H, T_new, Dh)
        if past_kv is not None:
            k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)  # (B, H, T_past + T_new, Dh)
        a, self_w = self.self_attn(h, kv=(k, v), mask=self_mask, return_attention=return_attention,
                                   head_mask=head_masks[0])
        x = x + self.drop(a)
        a, cross_w = self.cross_attn(self.ln2(x), kv=cross_kv, mask=cross_mask, return_attention=return_attention,
                                     head_mask=head_masks[1])
        x = x + self.drop(a)
        x = x + self.drop(self.ff(self.ln3(x)))
        return x, (k, v), self_w, cross_w


def layer_head_mask(head_mask, kind, layer):
    """Row `layer` of head_mask[kind] ((n_layer, n_head), 1 = keep), or None when not switching off."""
    if not head_mask or head_mask.get(kind) is None:
        return None
    return head_mask[kind][layer]


class TransformerTranslator(ZooModel, license="cc-by-nc-4.0", language=["en", "de"],
                            tags=["translation", "multi30k"]):
    """Encoder-decoder Transformer with one embedding matrix shared by source, target and output.

    The output projection *is* the embedding matrix (weight tying): a joint EN+DE subword
    vocabulary makes the three roles the same lookup table, and it saves vocab_size * d_model
    parameters.

    head_mask, wherever a method takes one: None, or {"encoder" | "decoder_self" | "cross":
    (n_layer, n_head) tensor, 1 = keep, 0 = switch the head off} for this call only.
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

    # ----- the network -------------------------------------------------------------------------
    def embed_tokens(self, ids, offset=0, embeddings=None):
        """Scaled embedding + sinusoidal position, positions starting at `offset`. embeddings: the
        tokens' embeddings (B, T, D) to use instead of looking ids up (attribution varies them)."""
        e = self.embed(ids) if embeddings is None else embeddings
        return self.drop(e * math.sqrt(self.d_model) + self.pe[offset: offset + ids.size(1)])  # (B, T, D)

    def encode(self, src, return_attention=False, head_mask=None, embeddings=None):
        """src (B, S) ids, right-padded -> memory (B, S, D), its key mask (B, 1, 1, S) and the
        encoder self-attention maps (tuple of (B, H, S, S), or empty). embeddings: see embed_tokens."""
        mask = key_padding_mask(src != self.pad_id)
        x = self.embed_tokens(src, embeddings=embeddings)
        maps = []
        for i, block in enumerate(self.encoder):
            x, w = block(x, mask=mask, return_attention=return_attention,
                         head_mask=layer_head_mask(head_mask, "encoder", i))
            maps.append(w)
        return self.enc_ln(x), mask, tuple(maps) if return_attention else ()

    def cross_kv(self, memory):
        """Each decoder layer's cross-attention keys and values of the encoder output."""
        return [block.cross_attn.project_kv(memory) for block in self.decoder]

    def decode(self, tgt, cross_kv, cross_mask=None, past=None, return_attention=False, head_mask=None):
        """Run the decoder on target ids tgt (B, T_new) that follow the positions in `past`.

        past: per layer the self-attention (k, v) of the earlier positions (a key/value cache), or
        None to start at position 0. Returns the final hidden states (B, T_new, D) (project()
        turns them into logits), the per-layer (k, v) over all positions so far, and the self- and
        cross-attention maps per layer ((B, H, T_new, T_total) and (B, H, T_new, S)) when asked for.
        """
        t_past = 0 if past is None else past[0][0].size(2)
        t_new = tgt.size(1)
        # New queries see every earlier key and the new keys up to themselves; a single new token
        # may see them all, so it needs no mask.
        self_mask = causal_mask(t_past + t_new, tgt.device)[t_past:] if t_new > 1 else None  # (T_new, T_total)
        x = self.embed_tokens(tgt, offset=t_past)
        kvs, self_maps, cross_maps = [], [], []
        for i, block in enumerate(self.decoder):
            masks = (layer_head_mask(head_mask, "decoder_self", i), layer_head_mask(head_mask, "cross", i))
            x, kv, sw, cw = block(x, cross_kv[i], cross_mask, self_mask, None if past is None else past[i],
                                  return_attention, masks)
            kvs.append(kv)
            self_maps.append(sw)
            cross_maps.append(cw)
        return self.dec_ln(x), kvs, tuple(self_maps), tuple(cross_maps)

    def project(self, h):
        """Hidden states (..., D) -> logits (..., V): the tied output projection, the embedding matrix."""
        return h @ self.embed.weight.T

    def forward(self, src, tgt_in):
        """Teacher forcing: src (B, S), tgt_in (B, T) starting with <s> -> logits (B, T, V)."""
        memory, src_mask = self.encode(src)[:2]
        return self.project(self.decode(tgt_in, self.cross_kv(memory), src_mask)[0])

    def sequence_log_prob(self, src, tgt_in, tgt_out, head_mask=None):
        """Teacher forcing: log p(tgt_out | src) per row, src (B, S), tgt_in and tgt_out (B, T) (tgt_in
        is <s> then tgt_out shifted by one); padding in tgt_out counts nothing. Returns (B,)."""
        memory, src_mask = self.encode(src, head_mask=head_mask)[:2]
        h = self.decode(tgt_in, self.cross_kv(memory), src_mask, head_mask=head_mask)[0]  # (B, T, D)
        logp = self.project(h).log_softmax(-1).gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return (logp * (tgt_out != self.pad_id)).sum(-1)

    def max_target_len(self, src_len):
        """Output length cap tied to the source: 1.5 x source tokens + 10, within max_len."""
        return min(self.max_len, int(1.5 * src_len) + 10)

    # ----- the text API: tokenizer, translate, explain, force_decode ---------------------------
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
        """English sentences -> (B, S) ids, each ending with </s>, right-padded."""
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

    def translate(self, texts, beam_size=5, length_penalty=decoding.LENGTH_PENALTY, batch_size=64, head_mask=None):
        """English sentences -> German sentences (detokenized text)."""
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single one in a list")
        # Sort by length so each batch pads little; restore the order at the end.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [None] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            src = self.batch_source([texts[i] for i in chunk])
            hyps = decoding.beam_search(self, src, beam_size, length_penalty, head_mask=head_mask)
            for i, h in zip(chunk, hyps, strict=True):
                out[i] = self.decode_ids(h)
        return out

    @torch.inference_mode()
    def familiarity(self, texts, beam_size=5, length_penalty=decoding.LENGTH_PENALTY):
        """How sure the model is of its own translation of each sentence: the mean log-probability
        per token (</s> included) of its beam search output, teacher-forced. It is low where the
        input is unlike the training data (the out-of-domain warning compares it with val's)."""
        src = self.batch_source(texts)
        outs = [h + [self.eos_id] for h in decoding.beam_search(self, src, beam_size, length_penalty)]
        tgt_in, tgt_out = self.teacher_batch(outs)
        lengths = torch.tensor([len(o) for o in outs], device=src.device)
        return (self.sequence_log_prob(src, tgt_in, tgt_out) / lengths).tolist()

    def teacher_batch(self, outs):
        """Output id lists, each ending with </s> -> the decoder's (input, target), each (B, T),
        right-padded: the input is the target shifted one step right behind <s>."""
        device = self.embed.weight.device
        tgt_out = torch.full((len(outs), max(map(len, outs))), self.pad_id, dtype=torch.long, device=device)
        for i, o in enumerate(outs):
            tgt_out[i, : len(o)] = torch.tensor(o)
        tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], self.bos_id), tgt_out[:, :-1]], dim=1)
        tgt_in[tgt_in == self.eos_id] = self.pad_id  # after </s> the decoder reads padding
        return tgt_in, tgt_out

    @torch.inference_mode()
    def teacher_force(self, src_ids, out_ids, head_mask=None):
        """One pass with the output fed back in: per-step distributions and every attention map.

        src_ids and out_ids are id lists, out_ids ending with </s>. Row t of the decoder maps is
        the step that produced out_ids[t]."""
        src = torch.tensor([src_ids], device=self.embed.weight.device)
        tgt_in = torch.tensor([[self.bos_id] + out_ids[:-1]], device=src.device)
        memory, src_mask, enc_maps = self.encode(src, return_attention=True, head_mask=head_mask)
        h, _, self_maps, cross_maps = self.decode(tgt_in, self.cross_kv(memory), src_mask, return_attention=True,
                                                  head_mask=head_mask)
        stack = lambda maps: torch.stack([m[0] for m in maps]).float().cpu().numpy()  # noqa: E731
        probs = self.project(h[0]).float().softmax(-1).cpu()  # (T_tgt, V)
        return probs, stack(enc_maps), stack(self_maps), stack(cross_maps)

    def explain(self, text, beam_size=5, length_penalty=decoding.LENGTH_PENALTY, top_k=5, head_mask=None):
        """Translate one sentence and return everything needed to show how.

        Keys: source_tokens, target_tokens (the output, ending with </s>), decoder_input_tokens (what
        the decoder read at each step: <s> then the output shifted by one: the keys of its
        self-attention), translation, cross_attention (n_layer, n_head, T_tgt, T_src),
        decoder_self_attention (n_layer, n_head, T_tgt, T_tgt), encoder_self_attention
        (n_layer, n_head, T_src, T_src), steps: for each output position the top_k candidates
        [(token, prob)] and the chosen token's probability.
        """
        src_ids = self.encode_text(text) + [self.eos_id]
        hyp = decoding.beam_search(self, self.batch_source([text]), beam_size, length_penalty, head_mask=head_mask)[0]
        out_ids = hyp + [self.eos_id]
        probs, enc, dec_self, cross = self.teacher_force(src_ids, out_ids, head_mask)
        top_p, top_i = probs.topk(top_k, dim=-1)
        steps = [{"token": self.token_strings([tok])[0], "prob": probs[t, tok].item(),
                  "candidates": list(zip(self.token_strings(top_i[t].tolist()), top_p[t].tolist(), strict=True))}
                 for t, tok in enumerate(out_ids)]
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
