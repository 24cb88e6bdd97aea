"""Is attention an explanation? The methods on known answers, on the zoo's models, through the tabs,
the API and concurrent requests."""

from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import numpy as np
import pytest
import torch

import zoo
from ui import sorter as sorter_tab
from zoo import attribution as at

METHOD_LINES = ("attention", "rollout", "gradient x input", "integrated gradients", "leave-one-out")


def one_token_target(which=2, t=5, d=4, seed=0):
    """A hand-built model whose output depends on token `which` only: the log-probability of class 0
    of a softmax over W e[which]."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, 3, generator=g)

    def forward(e):
        return (e[:, which] @ w).log_softmax(-1)[:, 0]

    return at.Target(forward, torch.randn(t, d, generator=g), torch.zeros(d))


def test_known_answer_one_token_drives_the_output():
    target = one_token_target()
    loo = at.leave_one_out(target)
    assert loo[2] != 0 and torch.count_nonzero(loo) == 1  # exactly 0 elsewhere
    for scores in (at.gradient_x_input(target), at.integrated_gradients(target)[0], loo):
        assert int(np.argmax(np.abs(np.asarray(scores)))) == 2
        assert np.allclose(np.delete(np.asarray(scores), 2), 0)
    ig, delta = at.integrated_gradients(target, 64)
    change = target.value(target.embeddings[None])[0] - target.value(torch.zeros(1, 5, 4))[0]
    assert float(ig.sum()) == pytest.approx(float(change), rel=1e-3) and delta < 1e-3


def test_rollout_rows_sum_to_one_and_the_identity_is_kept():
    maps = np.random.default_rng(0).random((3, 4, 6, 6))
    maps /= maps.sum(-1, keepdims=True)
    r = at.rollout(maps)
    assert r.shape == (6, 6) and np.allclose(r.sum(-1), 1)
    assert np.allclose(at.rollout(np.tile(np.eye(6), (2, 4, 1, 1))), np.eye(6))  # attention to self: no mixing


def test_spearman_of_identical_rankings_and_of_constants():
    assert at.spearman([0.1, 0.5, 0.3], [1, 9, 4]) == pytest.approx(1.0)
    assert at.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert at.spearman([1, 1, 2], [1, 1, 2]) == pytest.approx(1.0)  # ties take average ranks
    assert at.spearman([1, 2, 3], [5, 5, 5]) is None


def test_deletion_curve_and_aopc():
    target = one_token_target()
    curve, other = at.deletion_curves(target, [[2, 0, 1, 3, 4], [0, 1]])
    p = float(target.value(target.embeddings[None])[0].exp())
    assert len(other) == 3 and np.allclose(other, p)  # tokens 0 and 1 do not matter
    assert len(curve) == 6 and float(curve[0]) == pytest.approx(p)
    assert np.allclose(curve[1:], curve[1])  # after token 2 is gone nothing else matters
    assert at.aopc(curve) == pytest.approx(p - float(curve[1]), abs=1e-6)
    report = at.explain(target, {"attention": np.array([0.0, 0.0, 1.0, 0.0, 0.0])})
    assert report["faithfulness"]["attention"]["spearman"] == pytest.approx(
        at.spearman([0, 0, 1, 0, 0], report["scores"]["leave-one-out"]))
    assert report["faithfulness"]["random"]["aopc"] <= report["faithfulness"]["leave-one-out"]["aopc"] + 1e-6


def test_integrated_gradients_complete_on_the_shipped_sorter():
    """Completeness: at 64 steps the attributions sum to f(x) - f(baseline) within 1% for most
    inputs (the median over 24 seeded ones); where the straight path from the zero embedding swings
    hard, more steps converge and the reported delta shrinks with them."""
    model = zoo.load("sorter-pe")
    g = torch.Generator().manual_seed(0)
    errors = []
    for i in range(24):
        target, _, _ = at.sorter_target(model, torch.randint(0, 10, (8,), generator=g).tolist(), i % 8)
        change = float(target.value(target.embeddings[None])[0] - target.value(torch.zeros(1, 8, 64))[0])
        if abs(change) > 0.5:  # a target that the baseline hardly moves has no relative error to speak of
            ig, _ = at.integrated_gradients(target, 64)
            errors.append(abs(float(ig.sum()) - change) / abs(change))
    assert len(errors) >= 12 and np.median(errors) <= 0.01
    hard, _, _ = at.sorter_target(model, [7, 2, 9, 2, 5, 0, 8, 3], 4)
    deltas = [at.integrated_gradients(hard, n)[1] for n in (64, 1024)]
    assert deltas[1] < 0.01 * 3.78 < deltas[0]


def test_sorter_tab_explains_in_words_and_refuses_bad_positions():
    text, scores, curves, table = sorter_tab.attribute("7 2 9 2 5 0 8 3", 2, "sorter-pe", "2", "3")
    lines = text.splitlines()
    assert lines[0].startswith("sorter-pe, output position 2: predicted 2")
    assert [line.split(":")[0] for line in lines[1:6]] == [
        "attention (layer 2, head 3)", "attention (last layer, mean of heads)", "rollout", "gradient x input",
        "integrated gradients"]
    assert lines[6].startswith("leave-one-out: Spearman with leave-one-out 1.000")
    assert np.shape(scores.data[0]["z"]) == (6, 8) and len(table) == 6
    with pytest.raises(gr.Error, match="The output position must be a whole number from 0 to 7; got 8"):
        sorter_tab.attribute("7 2 9 2 5 0 8 3", 8)


def test_attribution_leaves_no_gradients_in_shared_models_under_concurrency():
    """Many requests at once on the one shared model: each gets what it gets alone, and no gradient
    is ever stored in the model's weights."""
    net = zoo.load("sorter-pe")
    cases = [([7, 2, 9, 2, 5, 0, 8, 3], p) for p in range(8)]

    def run(case):
        target, maps, _ = at.sorter_target(net, *case)
        return at.explain(target, at.attention_rows(maps, case[1], 0, 0))["scores"]["integrated gradients"]

    alone = [run(c) for c in cases]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(run, cases * 3))
    assert together == alone * 3
    assert all(p.grad is None for p in net.parameters())


@pytest.mark.app
def test_api_endpoints_answer_with_a_line_per_method(client):
    sort = client.predict("7 2 9 2 5 0 8 3", 0, "sorter-pe", api_name="/sort_attribution")[0]
    translate = client.predict("A man is riding a bicycle.", 1, "", api_name="/translate_attribution")[0]
    fill = client.predict("Hà Nội là <mask> của Việt Nam .", api_name="/phobert_fill_mask")[0]
    for text in (sort, translate, fill):
        methods = {line.split(" (")[0].split(":")[0] for line in text.splitlines()}
        assert set(METHOD_LINES) <= methods, text
        assert "Spearman with leave-one-out" in text
    assert "PhoBERT's top 5 for <mask>:" in fill


@pytest.mark.app
def test_api_refuses_bad_steps_and_masks(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="The output step must be a whole number from 0 to"):
        client.predict("A man is riding a bicycle.", 99, "", api_name="/translate_attribution")
    with pytest.raises(AppError, match="Put exactly one ‹mask› where a word should be predicted; the text has 0"):
        client.predict("Hà Nội là thủ đô của Việt Nam .", api_name="/phobert_fill_mask")


def test_corpus_faithfulness_tabulates_sorter_and_tiny_phobert(tmp_path):
    """training.faithfulness on a handful of predictions: one row per layer and method, Spearman in
    [-1, 1] or counted as undefined, a verdict against the published figures, and a card section."""
    from conftest import write_tiny_phobert

    from training import faithfulness as fa
    from training.cards import faithfulness_section
    from zoo import phobert

    reports = fa.sorter_reports(zoo.load("sorter-pe"), 4, seed=0)
    rows, random_aopc = fa.tabulate(reports)
    methods = {(r["layer"], r["method"]) for r in rows}
    assert {(1, "attention"), (1, "rollout"), (2, "attention"), (2, "rollout"), ("input", "leave-one-out"),
            ("input", "integrated gradients"), ("input", "gradient x input")} <= methods
    assert all(r["spearman"] is None or -1 <= r["spearman"] <= 1 for r in rows)
    assert all(0 <= r["undefined"] <= 4 for r in rows)
    # leave-one-out agrees with itself wherever it is defined
    assert next(r for r in rows if r["method"] == "leave-one-out")["spearman"] in (1.0, None)
    record = fa.summary(reports, "cmd", 1.0, "what")
    assert record["verdict"].startswith("Last layer (layer 2): raw attention")
    assert record["random_aopc"] == random_aopc
    card = "\n".join(faithfulness_section({"faithfulness": record}))
    assert "| 2 | rollout |" in card and record["verdict"] in card
    # a fill-mask prediction of a tiny PhoBERT goes through the same test
    explorer = phobert.PhobertExplorer(write_tiny_phobert(tmp_path))
    explorer.load()
    ph = fa.phobert_reports(explorer, ["tôi thích mùa hè nóng .", "tôi"], seed=0)
    assert len(ph) == 1  # a one-word sentence has nothing left to explain the mask with
    assert {(1, "attention"), (2, "rollout")} <= {(r["layer"], r["method"]) for r in fa.tabulate(ph)[0]}
