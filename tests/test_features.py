"""Training snapshots, head ablation, per-head statistics, exports and shareable links."""

import csv
import json
import re
import threading
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from ui import compare, export, sorter
from ui.common import head_mask, head_names
from zoo.sorter import DigitSorter, accuracy, eval_set
from zoo.stats import diagonal_share, entropy, head_table, sorter_answer_keys, target_key_share

EXAMPLE = "7 2 9 2 5 0 8 3"


# ----- snapshots -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sorter-pe", "sorter-nope"])
def test_snapshots_replay_training(name):
    snaps = zoo.snapshots(name)
    steps = [s["step"] for s in snaps]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 1500 and len(steps) >= 5
    x, y = eval_set(500, seed=3)
    assert accuracy(snaps[0]["model"], x, y)[0] < 0.2  # random initialisation: about chance
    final = zoo.load(name)
    for (k, v), (k2, v2) in zip(snaps[-1]["model"].state_dict().items(), final.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2)  # the last snapshot is the final model


def test_sorter_tab_snapshot_slider_changes_the_model():
    early = sorter.sort_digits(EXAMPLE, "sorter-pe", "1", "average", 0, [])
    final = sorter.sort_digits(EXAMPLE, "sorter-pe", "1", "average", sorter.FINAL_SNAPSHOT, [])
    assert "training step 0 of 1500" in early[4] and "final model" in final[4]
    assert final[0] == "0 2 2 3 5 7 8 9" and early[0] != final[0]
    assert not np.allclose(early[2].data[0]["z"], final[2].data[0]["z"])
    with pytest.raises(gr.Error, match="snapshot must be a whole number from 0 to 6"):
        sorter.sort_digits(EXAMPLE, "sorter-pe", "1", "average", 9, [])


def test_compare_uses_the_same_snapshot_for_both():
    text = compare.compare(EXAMPLE, "1", "average", 3)[0]
    assert "training step 200 of 1500" in text


# ----- head ablation -----------------------------------------------------------------------------
def test_head_mask_parsing():
    assert head_mask([], 2, 4) is None and head_mask(None, 2, 4) is None
    m = head_mask(["L1H2", "L2H4"], 2, 4)
    assert m.tolist() == [[1, 0, 1, 1], [1, 1, 1, 0]]
    assert head_names(1, 2, "cross ") == ["cross L1H1", "cross L1H2"]
    with pytest.raises(ValueError, match="Unknown head 'L3H1'; choose from L1H1, L1H2"):
        head_mask(["L3H1"], 2, 4)


def test_ablation_zeroes_a_heads_output():
    net = zoo.load("sorter-pe")
    x = torch.tensor([[7, 2, 9, 2, 5, 0, 8, 3]])
    ones = torch.ones(2, 4)
    assert torch.equal(net(x), net(x, head_mask=ones))
    # switching a head off = removing its slice of the output projection's input
    mask = ones.clone()
    mask[0, 1] = 0
    block = net.blocks[0]
    h = net.embed(x) * 8 + net.pe[:8]
    q = block.attn.split_heads(block.attn.q_proj(block.ln1(h)))
    k, v = block.attn.project_kv(block.ln1(h))
    out, _ = zoo.attention.scaled_dot_product_attention(q, k, v)
    out[:, 1] = 0
    expected = block.attn.out_proj(block.attn.merge_heads(out))
    got, _ = block.attn(block.ln1(h), head_mask=mask[0])
    assert torch.allclose(got, expected, atol=1e-6)


def test_ablation_reports_accuracy_with_and_without():
    answer, _, _, _, note, _ = sorter.sort_digits(EXAMPLE, "sorter-pe", "1", "average", sorter.FINAL_SNAPSHOT,
                                                  ["L2H1", "L2H2", "L2H3", "L2H4"])
    assert "Switched off L2H1, L2H2, L2H3, L2H4" in note and "1,000 fixed sequences" in note
    found = re.search(r"whole-sequence accuracy ([\d.]+) \(intact model ([\d.]+)\)", note)
    ablated, intact = map(float, found.groups())
    assert intact >= 0.99 and ablated < 0.2
    assert answer != "0 2 2 3 5 7 8 9"


def test_concurrent_ablations_do_not_leak():
    """Many threads, each with its own ablation, get exactly what they get alone."""
    cases = [[], ["L1H1"], ["L2H1", "L2H2", "L2H3", "L2H4"], ["L1H3", "L2H2"], ["L1H1", "L1H2", "L1H3", "L1H4"]]
    alone = {tuple(c): sorter.sort_digits(EXAMPLE, "sorter-pe", "2", "average", 6, c) for c in cases}
    results, errors = {}, []

    def work(i):
        c = cases[i % len(cases)]
        try:
            for _ in range(5):
                r = sorter.sort_digits(EXAMPLE, "sorter-pe", "2", "average", 6, c)
                results.setdefault(tuple(c), []).append(r)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for c, runs in results.items():
        for r in runs:
            assert r[0] == alone[c][0] and r[4] == alone[c][4]
            assert np.array_equal(np.asarray(r[2].data[0]["z"]), np.asarray(alone[c][2].data[0]["z"]))


# ----- per-head statistics -----------------------------------------------------------------------
def test_statistics_on_known_patterns():
    t = 4
    attn = np.zeros((1, 4, t, t))
    attn[0, 0] = np.eye(t)  # self
    attn[0, 1] = np.full((t, t), 1 / t)  # uniform
    attn[0, 2, :, 0] = 1  # first token
    attn[0, 3, 0, 0] = 1
    attn[0, 3, 1:, :-1] = np.eye(t - 1)  # previous token (row 0 has none: it looks at itself)
    ent = entropy(attn)
    assert ent[0, 0] == 0 and ent[0, 1] == pytest.approx(np.log(t)) and ent[0, 2] == 0
    assert diagonal_share(attn, 0)[0].tolist() == [1, 0.25, 0.25, 0.25]
    assert diagonal_share(attn, -1)[0, 3] == 1 and diagonal_share(attn, 1)[0, 3] == 0
    rows = head_table(attn)
    assert rows[2]["first token"] == 1 and rows[1]["entropy (nats)"] == round(np.log(t), 4)


def test_answer_digit_share():
    digits = [7, 2, 9, 2]
    keys = sorter_answer_keys(digits)
    assert keys == [[1, 3], [1, 3], [0], [2]]
    attn = np.zeros((1, 1, 4, 4))
    attn[0, 0, 0, 1] = attn[0, 0, 1, 3] = attn[0, 0, 2, 0] = 1  # three queries fetch their answer
    attn[0, 0, 3, 0] = 1  # the last one looks at the wrong key
    assert target_key_share(attn, keys)[0, 0] == pytest.approx(0.75)


def test_sorter_tab_statistics_table():
    rows = sorter.sort_digits(EXAMPLE, "sorter-pe", "1", "average")[5]
    assert len(rows) == 8 and [r[:2] for r in rows[:2]] == [[1, 1], [1, 2]]
    assert all(0 <= r[2] <= np.log(8) + 1e-6 and all(0 <= v <= 1 for v in r[3:]) for r in rows)
    select = sorter.select_head(SimpleNamespace(row_value=[2, 3] + [0] * 6))
    assert select == ("2", "3")


# ----- export ------------------------------------------------------------------------------------
def test_export_files_are_what_the_heatmap_shows():
    files = sorter.export_view(EXAMPLE, "sorter-pe", "2", "3")
    assert [f.rsplit(".", 1)[1] for f in files] == ["json", "csv", "svg", "png"]
    view = json.loads(open(files[0], encoding="utf-8").read())
    heat = sorter.sort_digits(EXAMPLE, "sorter-pe", "2", "3")[2]
    assert view["format"] == export.FORMAT and view["rows"] == "queries" and view["columns"] == "keys"
    assert view["query_tokens"] == list("72925083") and view["model"] == "sorter-pe"
    assert np.allclose(view["weights"], heat.data[0]["z"], atol=5e-5)  # the heatmap keeps 4 decimals
    rows = list(csv.reader(open(files[1], encoding="utf-8")))
    assert rows[0][1:] == [f"{i}:{d}" for i, d in enumerate("72925083")]  # repeated 2s stay apart
    assert np.allclose(np.array(rows[1:])[:, 1:].astype(float), view["weights"], atol=1e-6)
    svg = ET.parse(files[2]).getroot()
    assert svg.tag.endswith("svg") and len(svg.findall("{http://www.w3.org/2000/svg}rect")) == 1 + 64
    with Image.open(files[3]) as img:
        assert img.format == "PNG" and img.width > 8 * 20


def test_export_escapes_token_text():
    files = export.export_files(np.eye(2), ["<s>", "<img src=x onerror=alert(1)>"], ["a&b", "</s>"], "x")
    svg = open(files[2], encoding="utf-8").read()
    ET.fromstring(svg)  # still well-formed XML
    assert "<img" not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg


def test_model_snapshot_files_are_small():
    total = sum(p.stat().st_size for p in zoo.CHECKPOINTS.rglob("*") if p.is_file())
    assert total <= 60e6
    assert DigitSorter().num_parameters() * 4 < 500_000
