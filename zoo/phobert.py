"""PhoBERT explorer: segment Vietnamese text, run PhoBERT once, summarise its attention.

Everything the PhoBERT tab needs, without Gradio, so that it can be tested on a tiny random
RoBERTa instead of the real weights (which only a machine with Hub access can download).

Why segmentation: Vietnamese puts a space between syllables ("Giảng viên"), but PhoBERT was
pre-trained on word-segmented text where a word's syllables are joined by "_" ("Giảng_viên").
pyvi's ViTokenizer does that segmentation here. PhoBERT's fastBPE then splits rare words into
pieces, marking every piece but the last with a trailing "@@" ("xy@@", "z@@", "w"); the word view
glues them back together.

Shapes: L = layers, H = heads, T = tokens (with <s> and </s>), W = words. Attention rows are
queries, columns keys; every row sums to 1.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .hub import resolve_file
from .stats import entropy

HUB_IDS = ("vinai/phobert-base", "vinai/phobert-large")
DEFAULT_ID = HUB_IDS[0]
TOKENIZER_FILES = ("vocab.txt", "bpe.codes")
FIX = ("Go online (the weights download from the Hugging Face Hub on first use), or set PHOBERT_PATH to "
       "a local folder holding config.json, vocab.txt, bpe.codes and the weights (model.safetensors or "
       "pytorch_model.bin).")
EMPTY = "The text is empty: enter a Vietnamese sentence to analyse."
RETRY_SECONDS = 300


class PhobertUnavailable(RuntimeError):
    """The weights or tokenizer files cannot be found (offline, or a wrong local folder)."""


def segment_words(text):
    """Join the syllables of each Vietnamese word with "_", as PhoBERT's training data did."""
    from pyvi import ViTokenizer  # imported on first use: pyvi loads its CRF model on import (~2 s)

    return ViTokenizer.tokenize(text)


class PhobertExplorer:
    """One PhoBERT (tokenizer + model), loaded on first use and then shared by every request.

    source: "vinai/phobert-base" or "vinai/phobert-large" (downloaded from the Hub), or a local
    folder with config.json, vocab.txt, bpe.codes and the weights, read without touching the network.
    Default: $PHOBERT_PATH, else vinai/phobert-base. Any other hub id is refused, so that no
    arbitrary repository is ever fetched (and remote code is never trusted).

    Loading happens once, under a lock, so that concurrent first requests wait for one load instead
    of starting several. Afterwards the model is only read (eval mode, inference_mode), so requests
    run in parallel without a lock. `tokenizer` and `model` are None until then.
    """

    def __init__(self, source=None):
        self.source = str(source or os.environ.get("PHOBERT_PATH") or DEFAULT_ID)
        self.local = self.source not in HUB_IDS
        if self.local and not os.path.isdir(self.source) and re.fullmatch(r"\w[\w.-]*/[\w.-]+", self.source):
            raise ValueError(f"{self.source!r} is neither an allowed PhoBERT model ({', '.join(HUB_IDS)}) "
                             "nor an existing folder. Use one of those, or point PHOBERT_PATH at a local copy.")
        self.tokenizer = None
        self.model = None
        self._lock = threading.Lock()
        self._failed = None  # (time, error) of the last failed load
        self._breakdown = None  # breakdown()'s answer, once there is one

    def load(self):
        """Load tokenizer and model on the first call; later calls return at once. Returns self.

        A failed load is remembered for RETRY_SECONDS: offline, each attempt spends tens of seconds
        in Hub retries, and requests arriving meanwhile should get the explanation at once."""
        with self._lock:
            if self.model is None:
                if self._failed and time.monotonic() - self._failed[0] < RETRY_SECONDS:
                    raise self._failed[1]
                try:
                    self.tokenizer, self.model = self._load()
                except PhobertUnavailable as e:
                    self._failed = (time.monotonic(), e)
                    raise
                self._failed = None
        return self

    def _load(self):
        if self.local:
            folder = Path(self.source)
            if not folder.is_dir():
                raise PhobertUnavailable(f"The PhoBERT folder {self.source} does not exist. {FIX}")
            missing = [n for n in ("config.json", *TOKENIZER_FILES) if not (folder / n).is_file()]
            if missing:
                raise PhobertUnavailable(f"The PhoBERT folder {self.source} has no {', '.join(missing)}. {FIX}")
        from transformers import AutoModelForMaskedLM, PhobertTokenizer  # ~0.6 s to import: only when used

        try:
            # With its masked-LM head, for fill-mask; the encoder alone (.roberta) is what the tab
            # analyses. eager: transformers 5's default SDPA kernel returns no attention weights.
            model = AutoModelForMaskedLM.from_pretrained(self.source, attn_implementation="eager",
                                                         local_files_only=self.local, trust_remote_code=False)
            # PhoBERT's tokenizer is slow-only; built from its two files directly, it needs none of
            # the optional files (tokenizer_config.json, ...) that AutoTokenizer would look for.
            vocab, codes = (resolve_file(self.source, name) for name in TOKENIZER_FILES)
        except OSError as e:  # offline, no such file, ... (the Hub's errors are OSErrors too)
            cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PhobertUnavailable(f"PhoBERT could not be loaded from {self.source}. {FIX} ({cause})") from e
        return PhobertTokenizer(vocab, codes), model.eval()

    def breakdown(self):
        """parameter_breakdown of the encoder (with its pooler, as the seed article counts it) from
        config.json alone, without weights or network: the loaded model's config, the local folder's,
        or the Hub's when it is cached; None when none is at hand."""
        with self._lock:
            if self._breakdown is None:
                config = self.model.config if self.model is not None else self.config_path()
                self._breakdown = breakdown_from_config(config)
            return self._breakdown

    def config_path(self):
        if self.local:
            path = Path(self.source) / "config.json"
            return path if path.is_file() else None
        try:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(self.source, "config.json", local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached (or any Hub error): nothing to show
            return None

    @property
    def max_tokens(self):
        """Longest input in tokens, <s> and </s> included (loads the model). RoBERTa numbers
        positions from padding_idx + 1 = 2, so max_position_embeddings = 258 leaves 256."""
        return self.load().model.config.max_position_embeddings - 2

    def analyze(self, text, segment=True):
        """Run PhoBERT once on `text` and return an Analysis.

        segment=False skips pyvi, for text whose words are already joined with "_".
        Raises ValueError for empty text or text longer than max_tokens, PhobertUnavailable when
        the model cannot be loaded.
        """
        text = " ".join(text.split())  # newlines and runs of spaces would become BPE characters
        if not text:
            raise ValueError(EMPTY)
        self.load()
        segmented = segment_words(text) if segment else text
        pieces = self.tokenizer.tokenize(segmented)
        if not pieces:
            raise ValueError(EMPTY)
        n, limit = len(pieces) + 2, self.max_tokens
        if n > limit:
            raise ValueError(f"The text is {n} tokens long (with <s> and </s>), but PhoBERT reads at "
                             f"most {limit}. Shorten it and try again.")
        ids = self.tokenizer.build_inputs_with_special_tokens(self.tokenizer.convert_tokens_to_ids(pieces))
        with torch.inference_mode():
            out = self.model.roberta(input_ids=torch.tensor([ids]), output_attentions=True)
        att = torch.stack(out.attentions)[:, 0].float().numpy()  # (L, H, T, T)
        # Words come from the pieces, tokens from the ids: a piece outside the vocabulary shows as
        # <unk> among the tokens (that is what the model saw) but keeps its text in its word.
        words, index = group_words(pieces)
        word_index = [None, *index, None]
        head_entropy = entropy(att)  # (L, H): mean over query rows
        return Analysis(segmented=segmented, tokens=self.tokenizer.convert_ids_to_tokens(ids), words=words,
                        word_index=word_index, attentions=att, layer_entropy=head_entropy.mean(-1),
                        max_entropy=float(np.log(n)), head_entropy=head_entropy,
                        bos_share=att[..., 0].mean((1, 2)), word_attentions=pool_words(att, word_index, len(words)))


_explorer = None
_explorer_lock = threading.Lock()


def explorer():
    """The process-wide PhobertExplorer (created on the first call, loaded on first use)."""
    global _explorer
    with _explorer_lock:
        if _explorer is None:
            _explorer = PhobertExplorer()
        return _explorer


@dataclass
class Analysis:
    """What PhobertExplorer.analyze returns (L layers, H heads, T tokens, W words)."""

    segmented: str  # the text PhoBERT read, a word's syllables joined by "_"
    tokens: list[str]  # T BPE pieces as the model read them ("<unk>" if unknown), "<s>" first, "</s>" last
    words: list[str]  # W words: the pieces of each word glued together, "@@" dropped
    word_index: list[int | None]  # per token, the index of its word; None for <s> and </s>
    attentions: np.ndarray  # (L, H, T, T) float32
    layer_entropy: np.ndarray  # (L,) row entropy in nats, mean over heads and query rows
    max_entropy: float  # ln T: the entropy of a uniform row, the ceiling of layer_entropy
    head_entropy: np.ndarray  # (L, H) row entropy, mean over query rows
    bos_share: np.ndarray  # (L,) weight on <s>, mean over heads and query rows
    word_attentions: np.ndarray  # (L, H, W, W) see pool_words


def group_words(pieces):
    """(words, word_index): pieces ending in "@@" continue into the next piece of the same word."""
    words, index, open_word = [], [], False
    for piece in pieces:
        text = piece.removesuffix("@@")
        if open_word:
            words[-1] += text
        else:
            words.append(text)
        index.append(len(words) - 1)
        open_word = piece.endswith("@@")
    return words, index


def pool_words(att, word_index, n_words):
    """(L, H, T, T) token attention -> (L, H, W, W) word attention.

    Key pieces are summed: how much a query attends to a word is the total over its pieces. Query
    pieces are averaged: a word split into three pieces counts once, not three times. A row thus
    sums to what the word gives to words, i.e. 1 minus its (mean) weight on <s> and </s>.
    """
    member = np.zeros((n_words, att.shape[-1]), dtype=att.dtype)  # (W, T), 1 where token t is in word w
    positions = [t for t, w in enumerate(word_index) if w is not None]
    member[[word_index[t] for t in positions], positions] = 1.0
    queries = member / member.sum(1, keepdims=True)  # (W, T): mean over a word's pieces
    return queries @ att @ member.T  # (L, H, W, W)


def top_attended(result, token_index, layer, head, k=3):
    """[(token, weight)] of the k keys that query `token_index` attends to most, heaviest first
    (ties in token order)."""
    row = result.attentions[layer, head, token_index]  # (T,)
    top = np.argsort(-row, kind="stable")[:k]
    return [(result.tokens[i], float(row[i])) for i in top]


def breakdown_from_config(config):
    """parameter_breakdown of the encoder built from a config (or the path of its config.json) on
    PyTorch's meta device: every parameter has its shape but no storage, so counting costs no memory
    and needs no weights."""
    if config is None:
        return None
    from transformers import AutoConfig, AutoModel

    if not hasattr(config, "to_dict"):
        config = AutoConfig.from_pretrained(config)
    with torch.device("meta"):
        model = AutoModel.from_config(config)
    return parameter_breakdown(model)


def parameter_breakdown(model):
    """Where a RobertaModel's parameters sit, as in the article's table.

    total: every parameter (the pooler included); embeddings: word, position and token-type tables
    and their LayerNorm; blocks: all encoder blocks. Per block, attention is the self-attention's
    q, k, v and output projections, feed_forward the two Linears of the MLP, and layer_norm the
    block's two LayerNorms, so that the three add up to one block. phobert-base: 134,998,272 total,
    embeddings 49,353,216 (37%), blocks 85,054,464, attention 2,362,368 and feed-forward 4,722,432
    per block.
    """
    def count(*modules):
        return sum(p.numel() for m in modules for p in m.parameters())

    blocks = model.encoder.layer
    block = blocks[0]
    total, embeddings = count(model), count(model.embeddings)
    return {
        "total": total,
        "embeddings": embeddings,
        "embeddings_share": embeddings / total,
        "blocks": count(blocks),
        "n_blocks": len(blocks),
        "per_block_attention": count(block.attention.self, block.attention.output.dense),
        "per_block_feed_forward": count(block.intermediate.dense, block.output.dense),
        "per_block_layer_norm": count(block.attention.output.LayerNorm, block.output.LayerNorm),
    }


# ----- fill-mask, and what drives its prediction ---------------------------------------------------

MASK = "<mask>"


def segment_around_mask(text, segment=True):
    """pyvi's segmentation of the text around its one <mask>, which stays as it is."""
    parts = [" ".join(p.split()) for p in text.split(MASK)]
    if len(parts) != 2:
        found = len(parts) - 1
        raise ValueError(f"Put exactly one {MASK} where a word should be predicted; the text has {found}.")
    return f" {MASK} ".join(segment_words(p) if segment and p else p for p in parts).strip()


@dataclass
class FillMask:
    """What PhobertExplorer.fill_mask returns."""

    segmented: str
    tokens: list[str]  # T, <s> first, </s> last
    mask_index: int
    top: list  # [(token, probability)], most likely first
    attentions: np.ndarray  # (L, H, T, T)
    target: object  # a zoo.attribution.Target: the top prediction's log-probability of the input embeddings


def fill_mask(explorer, text, segment=True, top_k=5):
    """PhoBERT's masked-LM head on text with one <mask>: the top_k tokens for it, every attention map,
    and the attribution target for the top prediction (baseline: the <mask> embedding; the scored
    positions are the context tokens, not <s>, </s> or the mask)."""
    from .attribution import Target

    explorer.load()
    tok, model = explorer.tokenizer, explorer.model
    segmented = segment_around_mask(" ".join(str(text).split()), segment)
    ids = tok.build_inputs_with_special_tokens(tok.convert_tokens_to_ids(tok.tokenize(segmented)))
    if len(ids) > explorer.max_tokens:
        raise ValueError(f"The text is {len(ids)} tokens long (with <s> and </s>), but PhoBERT reads at most "
                         f"{explorer.max_tokens}. Shorten it and try again.")
    x = torch.tensor([ids])
    at = ids.index(tok.mask_token_id)
    with torch.no_grad():
        out = model(input_ids=x, output_attentions=True)
    probs = out.logits[0, at].float().softmax(-1)
    top_p, top_i = probs.topk(top_k)
    top = list(zip(tok.convert_ids_to_tokens(top_i.tolist()), top_p.tolist(), strict=True))
    word = int(top_i[0])
    embeddings = model.get_input_embeddings()

    def forward(e):
        return model(inputs_embeds=e).logits[:, at].float().log_softmax(-1)[:, word]

    target = Target(forward, embeddings(x)[0].detach(), embeddings.weight[tok.mask_token_id].detach(),
                    candidates=[i for i in range(1, len(ids) - 1) if i != at])
    return FillMask(segmented, tok.convert_ids_to_tokens(ids), at, top,
                    torch.stack(out.attentions)[:, 0].float().numpy(), target)
