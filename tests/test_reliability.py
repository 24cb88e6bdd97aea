"""Offline start, safe loading, and concurrent requests that never see each other's state."""

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

import zoo
from benchmarks.server import free_port, start_app

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for p in ROOT.rglob("*.py") if not {".git", "artifacts", "tests"} & set(p.parts)]
pytestmark = pytest.mark.app


def test_offline_start_without_phobert_weights():
    """HF_HUB_OFFLINE=1, an empty Hub cache, no PHOBERT_PATH: every other tab works and the
    PhoBERT endpoint explains what is missing and how to fix it. (The start-up time itself is
    measured by `python -m benchmarks.latency`.)"""
    port = free_port()
    proc, _ = start_app(port)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert client.predict("7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", 6, [], api_name="/sort")[0] == \
            "0 2 2 3 5 7 8 9"
        assert "sorter-nope" in client.predict("7 2 9 2 5 0 8 3", "1", "average", 6, api_name="/compare")[0]
        if "translator-en-de" in zoo.available():
            assert "Mann" in client.predict("A man is riding a bicycle.", 5, "", "cross-attention", "1", "average",
                                            [], api_name="/translate")[0]
        table = client.predict("[1, 0]\n[0, 1]", "", "", api_name="/basics_qkv")[1]
        # softmax([1, 0] / sqrt(2)): e^0.707 / (e^0.707 + 1) = 0.670 on the diagonal
        assert [row[1:3] for row in table["data"]] == [[0.67, 0.33], [0.33, 0.67]]
        with pytest.raises(AppError) as err:
            client.predict("Xin chào", True, 1, 1, None, "subword tokens", api_name="/phobert")
        message = str(err.value)
        assert "vinai/phobert-base" in message and "PHOBERT_PATH" in message and "online" in message
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_no_pickle_loading_or_remote_code_in_the_project():
    code = {p: p.read_text(encoding="utf-8") for p in SOURCES}
    assert not [p for p, text in code.items() if re.search(r"torch\.load\(|pickle\.load|joblib\.load", text)]
    assert not [p for p, text in code.items() if re.search(r"trust_remote_code\s*=\s*True", text)]
    assert any("trust_remote_code=False" in text for text in code.values())  # said explicitly where it matters


def test_every_zoo_file_is_in_its_manifest():
    for name in zoo.available():
        folder = zoo.CHECKPOINTS / name
        zoo.verify_manifest(folder)  # raises on any missing, extra or altered file
        assert (folder / "model.safetensors").is_file() and (folder / "manifest.json").is_file()


def test_manifest_catches_a_swapped_file(tmp_path, monkeypatch):
    import shutil

    for name in ("sorter-pe", "sorter-nope"):
        shutil.copytree(zoo.CHECKPOINTS / name, tmp_path / name)
    # swap the two models' weights: both files are valid safetensors of the right shapes
    nope_weights = (tmp_path / "sorter-nope" / "model.safetensors").read_bytes()
    (tmp_path / "sorter-pe" / "model.safetensors").write_bytes(nope_weights)
    monkeypatch.setattr(zoo, "CHECKPOINTS", tmp_path)
    with pytest.raises(ValueError, match="sorter-pe failed its integrity check.*model.safetensors"):
        zoo.load("sorter-pe")
    (tmp_path / "sorter-nope" / "extra.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match="extra.bin: not in the manifest"):
        zoo.load("sorter-nope")


def test_concurrent_api_requests_get_their_own_answers(client):
    """Different inputs and options at once: each answer equals the one the request gets alone."""
    jobs = [("/sort", ["7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", 6, []]),
            ("/sort", ["7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", 6, ["L2H1", "L2H2", "L2H3", "L2H4"]]),
            ("/sort", ["9 9 1 1 5 5 0 0", "sorter-nope", "2", "3", 0, ["L1H1"]]),
            ("/compare", ["4 4 1 9 1 4 0 9", "2", "average", 3]),
            ("/permutation_test", ["1 2 3 4 5 6 7 8", 7]),
            ("/basics_qkv", ["[1, 0]\n[0, 1]\n[1, 1]", "", ""])]
    if "translator-en-de" in zoo.available():
        jobs += [("/translate", ["A dog runs in the snow.", 5, "", "cross-attention", "1", "average", []]),
                 ("/translate", ["A dog runs in the snow.", 1, "", "cross-attention", "1", "average",
                                 ["cross L1H1", "cross L2H2"]])]

    def first(job):
        out = client.predict(*job[1], api_name=job[0])
        return repr(out[0] if isinstance(out, tuple) else out)

    alone = [first(j) for j in jobs]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(first, jobs * 4))
    assert together == alone * 4


def test_gradio_cache_of_exports_shrinks_back(tmp_path):
    """Every export is copied into Gradio's cache; the app has Gradio delete those copies once they
    are ATTENTION_LAB_CACHE_SECONDS old, so the disk does not fill with them."""
    cache = tmp_path / "gradio-cache"
    port = free_port()
    proc, _ = start_app(port, {"GRADIO_TEMP_DIR": str(cache), "ATTENTION_LAB_CACHE_SECONDS": "3"})
    files = lambda: [p for p in cache.rglob("*") if p.is_file()]  # noqa: E731
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        for i in range(3):
            out = client.predict(f"7 2 9 2 5 0 8 {i}", "sorter-pe", "1", "average", 6, [], api_name="/sort_export")
            assert len(out) == 4
        assert len(files()) >= 12  # 3 exports x json, csv, svg, png
        deadline = time.monotonic() + 30
        while files() and time.monotonic() < deadline:
            time.sleep(1)
        assert files() == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)
