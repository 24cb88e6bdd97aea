"""The translator's joint EN+DE subword vocabulary: byte-level BPE from Hugging Face `tokenizers`.

Byte-level BPE never meets an unknown character (anything falls back to bytes), so it is lossless:
decode(encode(text)) == text for NFC text, emoji and Cyrillic included. The vocabulary is learnt
on the training split only.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0, 1, 2, 3: the model's pad/bos/eos


def train_tokenizer(texts, vocab_size=8000, min_frequency=2):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok
