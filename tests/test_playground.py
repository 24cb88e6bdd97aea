"""The playground: tasks, positions, the article's mistakes, the training loop, the tab and its API."""

import time
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from ui import playground as tab
from zoo import playground as pg
from zoo.attention import MultiHeadAttention, rotate_pairs
from zoo.sorter import DigitTransformer, sorting_ceiling_without_positions

SHORT = pg.Design(steps=60, seed=3)


# ----- tasks and their answers ---------------------------------------------------------------------
def test_targets_by_hand():
    x = torch.tensor([[3, 1, 3, 0]])
    valid = torch.ones_like(x, dtype=torch.bool)
    assert pg.targets("sort", x, valid).tolist() == [[0, 1, 3, 3]]
    assert pg.targets("reverse", x, valid).tolist() == [[0, 3, 1, 3]]
    assert pg.targets("histogram", x, valid).tolist() == [[2, 1, 2, 1]]
    assert pg.targets("previous", x, valid).tolist() == [[0, 3, 1, 3]]


def test_targets_with_padding_ignore_the_pads():
    x = torch.tensor([[3, 1, 3, pg.PAD, pg.PAD]])
    valid = x != pg.PAD
    assert pg.targets("sort", x, valid).tolist() == [[1, 3, 3, pg.IGNORE, pg.IGNORE]]
    assert pg.targets("reverse", x, valid).tolist() == [[3, 1, 3, pg.IGNORE, pg.IGNORE]]
    assert pg.targets("histogram", x, valid).tolist() == [[2, 1, 2, pg.IGNORE, pg.IGNORE]]  # pads are not counted


def test_variable_length_batches():
    x, y = pg.batch("sort", 300, 8, torch.Generator().manual_seed(0), variable_lengths=True)
    lengths = (x != pg.PAD).sum(1)
    assert lengths.min() == 2 and lengths.max() == 8 and ((y == pg.IGNORE) == (x == pg.PAD)).all()


def test_ceilings_without_positions():
    assert pg.positionless_ceiling("sort", 8) == sorting_ceiling_without_positions(8) == pytest.approx(0.2999, abs=1e-4)
    assert pg.positionless_ceiling("histogram", 8) is None  # a model without positions can solve it
    # For odd n, a position's mirror is uniform over all positions: the same bound as sorting's, computed exactly there.
    assert pg.positionless_ceiling("reverse", 7) == pytest.approx(sorting_ceiling_without_positions(7), abs=0.006)
    assert 0.29 < pg.positionless_ceiling("previous", 8) < 0.32


# ----- positions and mistakes ----------------------------------------------------------------------
def test_rotary_scores_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)

    def score(m, n):
        return (rotate_pairs(q, torch.tensor([m])) * rotate_pairs(k, torch.tensor([n]))).sum().item()

    for m, n in [(0, 3), (5, 2), (7, 7)]:
        for shift in (1, 4, 11):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-4)
    assert score(0, 3) != pytest.approx(score(0, 4), abs=1e-3)  # and the offset does matter


def test_rotary_needs_an_even_head_size():
    with pytest.raises(ValueError, match="head size 3 must be even"):
        MultiHeadAttention(12, 4, rotary=True)


@pytest.mark.parametrize("mistake", ["no-scaling", "no-transpose"])
def test_a_mistake_changes_the_computation_but_not_the_shapes(mistake):
    torch.manual_seed(0)
    right, wrong = MultiHeadAttention(16, 4).eval(), MultiHeadAttention(16, 4, mistake=mistake).eval()
    wrong.load_state_dict(right.state_dict())
    x = torch.randn(2, 5, 16)
    (a, wa), (b, wb) = right(x, return_attention=True), wrong(x, return_attention=True)
    assert a.shape == b.shape and wa.shape == wb.shape and not torch.allclose(a, b, atol=1e-4)
    assert torch.allclose(wb.sum(-1), torch.ones(2, 4, 5), atol=1e-5)


def test_the_wrong_axis_lets_a_causal_model_see_the_future():
    x = torch.tensor([[1, 2, 3, 4]])
    later = torch.tensor([[1, 9, 9, 9]])
    for mistake, sees_future in (("none", False), ("mask-query-axis", True)):
        torch.manual_seed(0)
        model = DigitTransformer(seq_len=4, d_model=16, n_head=2, n_layer=1, d_ff=32, causal=True, mistake=mistake)
        first = model(x)[0, 0], model(later)[0, 0]  # position 0's output, with different later tokens
        assert (not torch.allclose(*first)) == sees_future, mistake


def test_post_ln_block_normalises_after_the_residual():
    from zoo.attention import EncoderBlock

    block = EncoderBlock(16, 2, 32, norm="post").eval()
    y, _ = block(torch.randn(3, 5, 16))
    assert torch.allclose(y.mean(-1), torch.zeros(3, 5), atol=1e-5)  # a LayerNorm is the last thing it does


# ----- designs, training, evaluation ---------------------------------------------------------------
@pytest.mark.parametrize("changes,message", [
    ({"d_model": 30, "n_head": 4}, "d_model must be divisible by the number of heads: 30 is not divisible by 4"),
    ({"positions": "rotary", "d_model": 20, "n_head": 4}, r"head size \(d_model / heads = 5\) must be even"),
    ({"steps": 0}, "steps must be a whole number from 1 to 3000; got 0"),
    ({"steps": 5000}, "steps must be a whole number from 1 to 3000"),
    ({"n_layer": 4, "d_model": 128}, "parameters; the playground trains at most 500,000"),
    ({"mistake": "mask-query-axis"}, "turn on the causal mask or variable lengths"),
    ({"task": "<b>x</b>"}, "task must be one of sort, reverse, histogram, previous"),
    ({"lr": 1.0}, "The learning rate must be from 0.0001 to 0.05"),
])
def test_bad_designs_are_refused_in_words(changes, message):
    with pytest.raises(ValueError, match=message):
        pg.Design(**changes).check()


def test_the_preset_sorter_has_the_articles_size():
    assert pg.PRESETS["the seed article's sorter"].build().num_parameters() == 101_258


def test_watch_streams_and_is_deterministic():
    runs = []
    for _ in range(2):
        updates = list(pg.watch(SHORT, pg.default_probe(SHORT), every=20))
        runs.append(updates)
    assert [p.step for _, p in runs[0]] == [0, 20, 40, 60] and runs[0][-1][1].done
    model_a, model_b = runs[0][-1][0], runs[1][-1][0]
    assert all(torch.equal(a, b) for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values(),
                                                 strict=True))
    assert runs[0][-1][1].loss == runs[1][-1][1].loss and runs[0][-1][1].probe_maps.shape == (2, 4, 8, 8)


def test_evaluate_reports_lengths_ceiling_and_step_by_step():
    model, _ = list(pg.watch(pg.Design(positions="none", steps=30), [1, 2, 3, 4, 5, 6, 7, 8]))[-1]
    result = pg.evaluate(model, pg.Design(positions="none", steps=30), n=200, per_length=50)
    assert list(result["accuracy_by_length"]) == list(range(2, 17))
    assert result["ceiling_without_positions"] == pytest.approx(0.2999, abs=1e-4)
    causal = pg.Design(task="previous", positions="none", causal=True, steps=30)
    model, _ = list(pg.watch(causal, pg.default_probe(causal)))[-1]
    result = pg.evaluate(model, causal, n=200, per_length=50)
    # a correctly masked model cannot use the future, so step by step scores what the whole input does
    assert result["step_by_step"]["per_position_accuracy"] == pytest.approx(result["per_position_accuracy"], abs=1e-6)


def test_the_time_limit_stops_a_run():
    updates = list(pg.watch(pg.Design(steps=3000), pg.default_probe(pg.Design()), max_seconds=1.0))
    assert updates[-1][1].stopped_by_time and updates[-1][1].done and updates[-1][1].step < 3000


# ----- the tab ------------------------------------------------------------------------------------
ARGS = ["sort", "sinusoidal", False, 2, 4, 64, 8, 60, 3]


def test_train_callback_streams_then_reports_accuracy(tmp_path):
    updates = list(tab.train(*ARGS, request=SimpleNamespace(session_hash="a")))
    assert len(updates) >= 2
    *_, last = updates
    assert "per-position accuracy" in last[0] and "whole-sequence accuracy" in last[0]
    files = last[6]
    assert [f.rsplit("/", 1)[1] for f in files] == ["model.safetensors", "config.json", "metrics.json"]
    loaded = DigitTransformer.from_pretrained(files[0].rsplit("/", 1)[0])
    run = last[7]
    x = torch.tensor([[7, 2, 9, 2, 5, 0, 8, 3]])
    assert torch.equal(loaded(x), run.model(x))  # the download is the trained model
    text, marks, fig = tab.probe("7 2 9 2 5 0 8 3", run)
    assert text.startswith("input 7 2 9 2 5 0 8 3 -> output") and marks.count('class="digit') == 8
    with pytest.raises(gr.Error, match="Type digits 0-9"):
        tab.probe("7 x 9", run)
    with pytest.raises(gr.Error, match="this model reads at most 16"):
        tab.probe("1" * 17, run)
    with pytest.raises(gr.Error, match="Train a model first"):
        tab.probe("1 2 3", None)


def test_stop_ends_the_run_with_the_model_as_it_is():
    session = SimpleNamespace(session_hash="stopper")
    stream = tab.train("sort", "sinusoidal", False, 2, 4, 64, 8, 2000, 0, request=session)
    first = next(stream)
    assert "step 0 of 2000" in first[0]
    tab.stop(session)
    rest = list(stream)
    assert len(rest) == 1 and "per-position accuracy" in rest[0][0]
    assert "step 100 of 2000" in rest[0][0]  # stopped at the next report, far from the budget
    assert rest[0][7].model is not None


def test_bad_input_through_the_callback_is_worded():
    with pytest.raises(gr.Error, match="d_model must be divisible"):
        list(tab.train("sort", "sinusoidal", False, 2, 4, 30, 8, 60, 3, request=None))




@pytest.mark.app
def test_api_train_and_probe(client):
    job = client.submit(*ARGS, api_name="/train")
    outputs = list(job)
    assert len(outputs) >= 2
    final = job.outputs()[-1][0]
    assert "per-position accuracy" in final and "whole-sequence accuracy" in final
    answer = client.predict("7 2 9 2 5 0 8 3", api_name="/probe")[0]
    assert answer.startswith("input 7 2 9 2 5 0 8 3 -> output")


@pytest.mark.app
def test_two_users_train_one_after_the_other(app_url):
    """One run at a time: the second user waits in the queue, then gets the same model (same seed)."""
    from gradio_client import Client
    from gradio_client.utils import Status

    first, second = Client(app_url, verbose=False), Client(app_url, verbose=False)
    args = ["sort", "sinusoidal", False, 2, 4, 64, 8, 400, 5]
    job1 = first.submit(*args, api_name="/train")
    deadline = time.monotonic() + 60
    while job1.status().code != Status.ITERATING and time.monotonic() < deadline:
        time.sleep(0.1)
    job2 = second.submit(*args, api_name="/train")
    seen = set()
    while not job2.done():
        seen.add(job2.status().code)
        time.sleep(0.05)
    assert Status.IN_QUEUE in seen
    assert job1.outputs()[-1][0].split("\n")[1] == job2.outputs()[-1][0].split("\n")[1]  # deterministic
