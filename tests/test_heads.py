"""The translator's head importance, contrastive view and out-of-domain warning."""

import math

import numpy as np
import pytest
import torch

import zoo
from zoo import attribution, decoding, heads

NAME = "translator-en-de"
pytestmark = pytest.mark.skipif(NAME not in zoo.available(), reason="translator not trained")
SENTENCE = "A dog runs in the snow."


@pytest.fixture(scope="module")
def net():
    return zoo.load(NAME)


@pytest.fixture(scope="module")
def pair(net):
    hyp = decoding.beam_search(net, net.batch_source([SENTENCE]), 5)[0]
    return net.encode_text(SENTENCE) + [net.eos_id], hyp + [net.eos_id]


def test_head_rows_cover_every_head_of_the_config(net):
    cfg = zoo.config(NAME)
    expected = {(kind, layer, head) for kind, n_layer in (("encoder self", cfg["n_enc_layer"]),
                                                         ("decoder self", cfg["n_dec_layer"]),
                                                         ("cross", cfg["n_dec_layer"]))
                for layer in range(1, n_layer + 1) for head in range(1, cfg["n_head"] + 1)}
    grids = {kind: torch.zeros(shape) for kind, shape in heads.grid_shape(net).items()}
    rows = heads.rows_of({"delta": grids})
    assert {(r["kind"], r["layer"], r["head"]) for r in rows} == expected and len(rows) == len(expected)
    record = zoo.metrics(NAME).get("head_importance")
    if record:  # the shipped table: one row per head, each with both measures
        assert {(r["kind"], r["layer"], r["head"]) for r in record["rows"]} == expected
        assert len(record["rows"]) == len(expected)
        assert all(isinstance(r["delta_bleu"], float) and r["gradient"] >= 0 for r in record["rows"])
        curves = record["pruning"]
        assert set(curves) == {"delta BLEU", "gradient"}
        assert all(c[0]["pruned"] == 0 and c[0]["bleu"] == record["base_bleu"] and c[-1]["pruned"] == len(expected)
                   for c in curves.values())


def layer_outputs(net, src, tgt_in, head_mask):
    """Every encoder and decoder block's output (hooks only read them) and the logits."""
    seen = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: seen.append(out[0].detach().clone()))
             for b in [*net.encoder, *net.decoder]]
    try:
        with torch.no_grad():
            memory, mask = net.encode(src, head_mask=head_mask)[:2]
            logits = net.project(net.decode(tgt_in, net.cross_kv(memory), mask, head_mask=head_mask)[0])
    finally:
        for h in hooks:
            h.remove()
    return seen, logits


@pytest.mark.parametrize("kind, layer", [("encoder", 1), ("decoder_self", 0), ("cross", 2)])
def test_zeroing_a_head_changes_the_logits_and_nothing_before_it(net, pair, kind, layer):
    src_ids, out_ids = pair
    src, tgt_in, _ = heads.pair_tensors(net, src_ids, out_ids)
    before, logits = layer_outputs(net, src, tgt_in, None)
    after, logits_off = layer_outputs(net, src, tgt_in, heads.mask_without(net, [(kind, layer, 1)]))
    first = layer if kind == "encoder" else len(net.encoder) + layer  # the block holding the head
    for i in range(first):
        assert torch.equal(before[i], after[i]), f"block {i} changed"
    assert (before[first] - after[first]).abs().max() > 1e-3
    assert (logits - logits_off).abs().max() > 1e-3


def test_sentence_effects_match_one_pass_per_head(net, pair):
    src_ids, out_ids = pair
    base, grid = heads.sentence_effects(net, src_ids, out_ids)
    probs = net.teacher_force(src_ids, out_ids)[0]
    assert base == pytest.approx(float(probs[torch.arange(len(out_ids)), out_ids].log().sum()), abs=1e-4)
    src, tgt_in, tgt_out = heads.pair_tensors(net, src_ids, out_ids)
    with torch.no_grad():
        off = net.sequence_log_prob(src, tgt_in, tgt_out, heads.mask_without(net, [("cross", 2, 2)])).item()
    assert grid["cross"][2, 2].item() == pytest.approx(off - base, abs=1e-5)
    assert {k: tuple(g.shape) for k, g in grid.items()} == heads.grid_shape(net)
    assert sum(float(g.abs().sum()) for g in grid.values()) > 0.1


def test_gradient_importance_is_normalised_per_layer(net, pair):
    src, tgt_in, tgt_out = heads.pair_tensors(net, *pair)
    scores = heads.gradient_importance(net, [(src, tgt_in, tgt_out)] * 2)
    for kind, g in scores.items():
        assert tuple(g.shape) == heads.grid_shape(net)[kind]
        assert torch.allclose(g.norm(dim=1), torch.ones(g.size(0)), atol=1e-5)
        assert (g >= 0).all()
    assert all(p.grad is None for p in net.parameters())  # the gates' gradient only


def test_contrast_of_a_token_with_itself_is_zero(net, pair):
    src_ids, out_ids = pair
    target = attribution.contrast_target(net, src_ids, out_ids[:1], [out_ids[1]], [out_ids[1]])
    assert target.value(target.embeddings[None]).item() == 0.0
    assert np.allclose(attribution.leave_one_out(target).numpy(), 0)
    assert np.allclose(attribution.gradient_x_input(target).numpy(), 0)


def test_contrast_scores_pieces_as_the_sum_of_their_log_probabilities(net, pair):
    src_ids, out_ids = pair
    pieces = attribution.alternative_pieces(net, out_ids[1], "Hündin")
    assert len(pieces) > 1 and net.token_strings(pieces)[0].startswith("▁")
    lp_chosen, lp_alt = attribution.continuation_log_probs(net, src_ids, out_ids[:1], [[out_ids[1]], pieces])
    probs = net.teacher_force(src_ids, out_ids[:1] + pieces + [net.eos_id])[0]
    by_hand = sum(math.log(probs[1 + i, p].item()) for i, p in enumerate(pieces))
    assert lp_alt == pytest.approx(by_hand, abs=1e-4)
    target = attribution.contrast_target(net, src_ids, out_ids[:1], [out_ids[1]], pieces)
    assert target.value(target.embeddings[None]).item() == pytest.approx(lp_chosen - lp_alt, abs=1e-4)
    assert attribution.alternative_pieces(net, out_ids[0], "Der") == net.tokenizer.encode("Der").ids  # no space


def test_familiarity_is_the_mean_log_probability_the_tab_shows(net):
    info = net.explain(SENTENCE)
    from_steps = float(np.mean([math.log(s["prob"]) for s in info["steps"]]))
    batched = net.familiarity([SENTENCE, "I love you.", "Two children play soccer on the beach."])
    assert batched[0] == pytest.approx(from_steps, abs=1e-4)
    assert batched[1] < batched[0]  # the committed example of a sentence the model does not know


def test_auroc_known_answers():
    from training.ood import auroc

    assert auroc([-0.1, -0.2], [-1.0, -2.0]) == 1.0
    assert auroc([-1.0, -2.0], [-0.1, -0.2]) == 0.0
    assert auroc([-1.0], [-1.0]) == 0.5


def test_endpoints_through_the_api(client):
    from gradio_client.exceptions import AppError

    text, *_ = client.predict(SENTENCE, api_name="/translate_heads")
    assert text.startswith("Translation: Ein Hund") and "lower it most: " in text
    text, *_ = client.predict(SENTENCE, 1, "Katze", "1", "1", api_name="/translate_contrast")
    assert text.startswith("Step 1 of the model's translation") and "'▁Katze' has p = " in text
    assert "integrated gradients: Spearman with leave-one-out" in text
    for alternative, message in (("", "Type an alternative"), ("Hund", "is the token the model chose at step 1")):
        with pytest.raises(AppError, match=message):
            client.predict(SENTENCE, 1, alternative, "1", "1", api_name="/translate_contrast")
    with pytest.raises(AppError, match="pieces of the model's vocabulary; after step 1 at most 127 fit"):
        client.predict(SENTENCE, 1, "🚲" * 40, "1", "1", api_name="/translate_contrast")
    result = client.predict("I love you.", 5, "", "cross-attention", "1", "average", [], api_name="/translate")
    assert "mean token log-probability" in result[-1]
