import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"

# Tests are many small computations: one thread is faster than fighting over two.
torch.set_num_threads(1)
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


# ----- a tiny PhoBERT: the same loading path as the real one, random weights ----------------------
TINY_WORDS = ("tôi", "thích", "mùa", "hè", "nóng", ".")
TINY_SPLIT_WORD = ("Hà_", "Nội")  # "Hà_Nội" is not in the tiny vocabulary: it becomes "Hà_@@" + "Nội"


def bpe_merges(piece, last):
    """bpe.codes lines that build `piece` from its characters, left to right; a word's last piece
    ends in the end-of-word marker "</w>"."""
    symbols = list(piece)
    if last:
        symbols[-1] += "</w>"
    lines, built = [], symbols[0]
    for s in symbols[1:]:
        lines.append(f"{built} {s} 1")
        built += s
    return lines


def write_tiny_roberta(folder, vocab_size):
    """A 2-layer, 2-head RoBERTa with its masked-LM head and random weights, saved as PhoBERT would be
    (safetensors)."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=258, type_vocab_size=1,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2, initializer_range=0.2)
    RobertaForMaskedLM(config).save_pretrained(folder)
    return folder


def write_tiny_phobert(folder):
    """vocab.txt + bpe.codes (PhoBERT's formats) for a handful of words, and a tiny model."""
    vocab = [*TINY_WORDS, TINY_SPLIT_WORD[0] + "@@", TINY_SPLIT_WORD[1]]
    codes = [line for w in TINY_WORDS for line in bpe_merges(w, True)]
    codes += bpe_merges(TINY_SPLIT_WORD[0], False) + bpe_merges(TINY_SPLIT_WORD[1], True)
    (folder / "vocab.txt").write_text("".join(f"{t} {100 - i}\n" for i, t in enumerate(vocab)), encoding="utf-8")
    (folder / "bpe.codes").write_text("\n".join(codes) + "\n", encoding="utf-8")
    return write_tiny_roberta(folder, 4 + len(vocab) + 1)  # <s> <pad> </s> <unk>, the vocabulary, <mask>


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data when this checkout has it (CI and the dev machine do); else skip."""
    if not SHARED.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """The real app, launched once on a free loopback port for the API and browser tests.

    PhoBERT's weights can't be downloaded here, so PHOBERT_PATH points at a tiny random model with
    PhoBERT's real tokenizer (from ../shared/data when present, else a toy vocabulary)."""
    import shutil

    folder = tmp_path_factory.mktemp("app-phobert")
    real = SHARED / "phobert-tokenizer"
    if real.is_dir():
        for name in ("vocab.txt", "bpe.codes"):
            shutil.copy(real / name, folder)
        write_tiny_roberta(folder, 64_001)
    else:
        write_tiny_phobert(folder)
    os.environ["PHOBERT_PATH"] = str(folder)
    import app

    port = free_port()
    app.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **app.LAUNCH)
    yield f"http://127.0.0.1:{port}/"
    app.demo.close()


@pytest.fixture(scope="session")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)
