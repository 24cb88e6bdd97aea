"""zoo.phobert without the real weights: a tiny random RoBERTa with a hand-made PhoBERT-format
vocabulary, saved to a folder and loaded like a local copy of PhoBERT; then PhoBERT's real
tokenizer files and config from ../shared/data."""

import shutil
import threading
import time

import huggingface_hub
import numpy as np
import pytest
import torch
from conftest import write_tiny_phobert, write_tiny_roberta
from transformers import AutoConfig, AutoModel

from zoo import phobert
from zoo.phobert import PhobertExplorer, PhobertUnavailable, breakdown_from_config, parameter_breakdown, top_attended
from zoo.stats import row_entropy

SENTENCE = "Giảng viên giải thích rất dễ hiểu nhưng phòng học quá nóng"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Folder with vocab.txt, bpe.codes, config.json and model.safetensors of a tiny PhoBERT."""
    return write_tiny_phobert(tmp_path_factory.mktemp("tiny-phobert"))


@pytest.fixture(scope="module")
def tiny_explorer(tiny):
    return PhobertExplorer(tiny).load()


def test_analysis_shapes_rows_and_word_groups(tiny_explorer):
    r = tiny_explorer.analyze("tôi thích Hà_Nội .", segment=False)
    assert r.segmented == "tôi thích Hà_Nội ."
    assert r.tokens == ["<s>", "tôi", "thích", "Hà_@@", "Nội", ".", "</s>"]
    assert r.words == ["tôi", "thích", "Hà_Nội", "."]
    assert r.word_index == [None, 0, 1, 2, 2, 3, None]
    assert r.attentions.dtype == np.float32 and r.attentions.shape == (2, 2, 7, 7)
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert r.layer_entropy.shape == (2,) and r.head_entropy.shape == (2, 2) and r.bos_share.shape == (2,)
    assert r.word_attentions.shape == (2, 2, 4, 4)
    model = tiny_explorer.model
    assert not model.training and model.config._attn_implementation == "eager"


def test_unknown_pieces_show_as_unk_but_keep_their_word(tiny_explorer):
    r = tiny_explorer.analyze("tôi Hà", segment=False)  # "Hà" alone becomes "H@@" + "à", both unknown
    assert r.tokens == ["<s>", "tôi", "<unk>", "<unk>", "</s>"]
    assert r.words == ["tôi", "Hà"] and r.word_index == [None, 0, 1, 1, None]


def test_segmentation_joins_syllables(tiny_explorer):
    r = tiny_explorer.analyze("tôi  thích\nHà Nội")
    assert r.segmented == "tôi thích Hà_Nội"
    assert r.words == ["tôi", "thích", "Hà_Nội"]


def test_entropy_and_bos_share_match_numpy(tiny_explorer):
    r = tiny_explorer.analyze("tôi thích mùa hè Hà_Nội nóng .", segment=False)
    p = r.attentions.astype(np.float64)  # (L, H, T, T)
    with np.errstate(divide="ignore", invalid="ignore"):
        rows = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)  # (L, H, T)
    np.testing.assert_allclose(r.head_entropy, rows.mean(-1), rtol=1e-5)
    np.testing.assert_allclose(r.layer_entropy, rows.mean((1, 2)), rtol=1e-5)
    assert r.max_entropy == pytest.approx(np.log(len(r.tokens)))
    assert (r.layer_entropy <= r.max_entropy + 1e-6).all()
    np.testing.assert_allclose(r.bos_share, p[..., 0].mean((1, 2)), rtol=1e-5)


def test_entropy_counts_zero_weights_as_zero():
    p = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]], dtype=np.float32)
    np.testing.assert_allclose(row_entropy(p), [0.0, np.log(2), np.log(3)], rtol=1e-6)


def test_word_view_sums_key_pieces_and_averages_query_pieces(tiny_explorer):
    r = tiny_explorer.analyze("Hà_Nội tôi Hà_Nội", segment=False)
    assert r.words == ["Hà_Nội", "tôi", "Hà_Nội"]
    a = r.attentions
    members = [[t for t, w in enumerate(r.word_index) if w == i] for i in range(len(r.words))]
    for i, queries in enumerate(members):
        for j, keys in enumerate(members):
            expected = a[:, :, queries][:, :, :, keys].sum(-1).mean(-1)  # (L, H)
            np.testing.assert_allclose(r.word_attentions[:, :, i, j], expected, rtol=1e-5)
    specials = a[..., [0, -1]].sum(-1)  # (L, H, T): weight on <s> and </s>
    by_word = np.stack([specials[..., m].mean(-1) for m in members], -1)  # (L, H, W)
    np.testing.assert_allclose(r.word_attentions.sum(-1), 1 - by_word, rtol=1e-5)


def test_top_attended_is_the_heaviest_keys_in_order(tiny_explorer):
    r = tiny_explorer.analyze("tôi thích mùa hè nóng", segment=False)
    row = r.attentions[1, 0, 5]
    top = top_attended(r, token_index=5, layer=1, head=0, k=3)
    assert [w for _, w in top] == sorted(row.tolist(), reverse=True)[:3]
    assert all(r.tokens[int(np.flatnonzero(row == w)[0])] == t for t, w in top)
    assert len(top_attended(r, 0, 0, 1, k=50)) == len(r.tokens)


def test_length_limit_is_256_tokens_with_specials(tiny_explorer):
    assert tiny_explorer.max_tokens == 256
    r = tiny_explorer.analyze(" ".join(["tôi"] * 254), segment=False)
    assert r.attentions.shape[-1] == 256
    with pytest.raises(ValueError, match="257 tokens.*at most 256"):
        tiny_explorer.analyze(" ".join(["tôi"] * 255), segment=False)


@pytest.mark.parametrize("text", ["", "  \n\t "])
def test_empty_text_is_refused_before_loading(tmp_path, text):
    with pytest.raises(ValueError, match="empty"):
        PhobertExplorer(tmp_path / "absent").analyze(text)


def test_missing_folder_says_what_and_how(tmp_path):
    with pytest.raises(PhobertUnavailable, match="does not exist.*PHOBERT_PATH"):
        PhobertExplorer(tmp_path / "absent").load()


def test_incomplete_folder_names_the_missing_files(tiny, tmp_path):
    shutil.copy(tiny / "vocab.txt", tmp_path)
    with pytest.raises(PhobertUnavailable, match="config.json, bpe.codes.*PHOBERT_PATH"):
        PhobertExplorer(tmp_path).load()
    for name in ("config.json", "bpe.codes"):
        shutil.copy(tiny / name, tmp_path)
    with pytest.raises(PhobertUnavailable, match="could not be loaded.*PHOBERT_PATH"):  # no weights
        PhobertExplorer(tmp_path).load()


@pytest.mark.parametrize("source", ["someone/phobert-base", "vinai/phobert-base-v2"])
def test_other_hub_ids_are_refused(source):
    with pytest.raises(ValueError, match="vinai/phobert-base, vinai/phobert-large"):
        PhobertExplorer(source)


def test_offline_hub_id_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    ex = PhobertExplorer("vinai/phobert-base")
    assert not ex.local
    with pytest.raises(PhobertUnavailable, match="vinai/phobert-base.*online.*PHOBERT_PATH"):
        ex.load()
    assert ex.model is None


def test_phobert_path_and_the_process_wide_explorer(monkeypatch, tiny):
    monkeypatch.setenv("PHOBERT_PATH", str(tiny))
    monkeypatch.setattr(phobert, "_explorer", None)
    ex = phobert.explorer()
    assert ex is phobert.explorer() and ex.source == str(tiny) and ex.local
    assert ex.model is None  # nothing is loaded until first use
    assert ex.analyze("tôi thích Hà_Nội").words == ["tôi", "thích", "Hà_Nội"]
    monkeypatch.delenv("PHOBERT_PATH")
    assert PhobertExplorer().source == "vinai/phobert-base"


def test_concurrent_first_use_loads_once(monkeypatch, tiny):
    loads = []
    real_load = PhobertExplorer._load

    def slow_load(self):
        loads.append(1)
        time.sleep(0.2)  # long enough for every thread to arrive while the first one loads
        return real_load(self)

    monkeypatch.setattr(PhobertExplorer, "_load", slow_load)
    ex = PhobertExplorer(tiny)
    results = [None] * 4

    def work(i):
        results[i] = ex.analyze("tôi thích mùa hè", segment=False)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1
    for r in results[1:]:
        np.testing.assert_array_equal(r.attentions, results[0].attentions)


def test_breakdown_parts_add_up(tiny_explorer):
    b = tiny_explorer.breakdown()  # the encoder from its config, with the pooler, as the article counts it
    attention, feed_forward, norms = 4 * (16 * 16 + 16), 16 * 32 + 32 + 32 * 16 + 16, 2 * 2 * 16
    assert b["per_block_attention"] == attention and b["per_block_feed_forward"] == feed_forward
    assert b["per_block_layer_norm"] == norms and b["n_blocks"] == 2
    assert b["blocks"] == 2 * (attention + feed_forward + norms)
    pooler = 16 * 16 + 16
    assert b["total"] == b["embeddings"] + b["blocks"] + pooler
    encoder = sum(p.numel() for p in tiny_explorer.model.roberta.parameters())  # the loaded one has no pooler
    assert encoder == b["total"] - pooler


# ----- PhoBERT's real tokenizer and config (../shared/data) ---------------------------------------

@pytest.fixture(scope="module")
def real_tokenizer_explorer(shared_data, tmp_path_factory):
    """PhoBERT's real vocab.txt and bpe.codes beside a tiny random model of the same vocabulary."""
    folder = tmp_path_factory.mktemp("phobert-tokenizer")
    for name in ("vocab.txt", "bpe.codes"):
        shutil.copy(shared_data / "phobert-tokenizer" / name, folder)
    write_tiny_roberta(folder, 64_001)
    return PhobertExplorer(folder).load()


def test_real_tokenizer_segments_and_tokenizes_the_article_sentence(real_tokenizer_explorer):
    r = real_tokenizer_explorer.analyze(SENTENCE)
    assert r.tokens == ["<s>", "Giảng_viên", "giải_thích", "rất", "dễ", "hiểu", "nhưng", "phòng", "học", "quá",
                        "nóng", "</s>"]
    assert r.words == r.tokens[1:-1]
    weights = [w for _, w in top_attended(r, r.tokens.index("nóng"), layer=1, head=0, k=3)]
    assert len(weights) == 3 and weights == sorted(weights, reverse=True)


def test_real_tokenizer_ids_and_subword_merging(real_tokenizer_explorer):
    tok = real_tokenizer_explorer.tokenizer
    assert len(tok) == 64_001
    ids = tok("Tôi là sinh_viên trường đại_học Công_nghệ .")["input_ids"]
    assert ids == [0, 218, 8, 649, 212, 956, 2413, 5, 2]
    r = real_tokenizer_explorer.analyze("Hà_Nội xyzqw", segment=False)
    assert r.tokens == ["<s>", "Hà_Nội", "xy@@", "z@@", "q@@", "w", "</s>"]
    assert r.words == ["Hà_Nội", "xyzqw"]


def test_full_size_breakdown_matches_the_article(shared_data):
    config = AutoConfig.from_pretrained(shared_data / "phobert-tokenizer" / "config_vinai_phobert-base.json")
    b = breakdown_from_config(config)  # shapes only, on the meta device: no 540 MB of random weights
    with torch.device("meta"):
        assert parameter_breakdown(AutoModel.from_config(config)) == b
    assert b["total"] == 134_998_272 and round(b["total"] / 1e6, 1) == 135.0
    assert b["embeddings"] == 49_353_216 and round(b["embeddings"] / 1e6, 1) == 49.4
    assert round(100 * b["embeddings_share"]) == 37
    assert b["blocks"] == 85_054_464 and round(b["blocks"] / 1e6, 1) == 85.1 and b["n_blocks"] == 12
    assert b["per_block_attention"] == 4 * 768 * 768 + 4 * 768 == 2_362_368
    assert b["per_block_feed_forward"] == 768 * 3072 + 3072 + 3072 * 768 + 768 == 4_722_432
    assert round(b["per_block_attention"] / 1e6, 2) == 2.36 and round(b["per_block_feed_forward"] / 1e6, 2) == 4.72

