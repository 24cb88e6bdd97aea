"""The app through its API, as a gradio_client user sees it; and the tab callbacks called directly."""

import gradio as gr
import numpy as np
import pytest
from gradio_client.exceptions import AppError
from transformers import AutoConfig, AutoModel

import zoo
from ui import compare, sorter

pytestmark = pytest.mark.app


# ----- callbacks, called directly ------------------------------------------------------------------
@pytest.mark.parametrize("text", ["7 2 9 2 5 0 8 3", "7,2,9,2,5,0,8,3", " 7, 2 9,2 5 0 8 3 ", "72925083"])
def test_parse_digits_accepts_spaces_commas_or_nothing(text):
    assert sorter.parse_digits(text) == [7, 2, 9, 2, 5, 0, 8, 3]


@pytest.mark.parametrize("text,message", [
    ("", "Type 8 digits"), ("1 2 3", "Got 3 digits"), ("1 2 3 4 5 6 7 8 9", "Got 9 digits"),
    ("1 2 3 4 5 6 7 x", "'x' is not a digit"), ("10 2 3 4 5 6 7 8", "'10' is not a digit"),
    ("-1 2 3 4 5 6 7 8", "'-1' is not a digit"), ("١ ٢ ٣ ٤ ٥ ٦ ٧ ٨", "is not a digit"),
    ("<b>1</b> 2 3 4 5 6 7 8", "'‹b›1‹/b›' is not a digit"),
])
def test_sort_rejects_bad_input_with_a_message(text, message):
    with pytest.raises(gr.Error) as err:
        sorter.sort_digits(text, "sorter-pe")
    assert message in err.value.message
    assert "<" not in err.value.message


def test_sort_callback_values():
    answer, marks, heat, overview, note, stats = sorter.sort_digits("7 2 9 2 5 0 8 3", "sorter-pe", "2", "3")
    assert answer == "0 2 2 3 5 7 8 9"
    assert marks.count('class="digit ok"') == 8 and "8/8 positions right" in marks
    z = heat.data[0]["z"]
    assert len(z) == 8 and all(abs(sum(row) - 1) < 5e-4 for row in z)  # 8 weights of 4 decimals each
    assert list(heat.layout["yaxis"]["ticktext"]) == ["7", "2", "9", "2", "5", "0", "8", "3"]  # duplicates kept
    mosaic = np.array(overview.data[0]["z"], dtype=float)  # 2 layers x (4 heads + average), 8 x 8 tiles
    assert mosaic.shape == (2 * 9 - 1, 5 * 9 - 1) and np.isnan(mosaic[8]).all() and np.isnan(mosaic[:, 8]).all()
    np.testing.assert_allclose(mosaic[9:17, 18:26], z, atol=1e-3)  # tile L2 H3 is the selected head's map
    assert [a["text"] for a in overview.layout["annotations"]][5:] == ["L2 H1", "L2 H2", "L2 H3", "L2 H4", "L2 avg"]
    assert "final model: training step 1500" in note and "No heads switched off" in note
    assert len(stats) == 8


def test_nope_sorter_marks_wrong_positions():
    answer, marks, *_ = sorter.sort_digits("7 2 9 2 5 0 8 3", "sorter-nope", "1", "average")
    right = sum(a == b for a, b in zip(answer.split(), "0 2 2 3 5 7 8 9".split(), strict=True))
    assert marks.count('class="digit ok"') == right < 8
    assert marks.count('class="digit bad"') == 8 - right


def test_compare_and_permutation_test():
    text, pe, nope, diff = compare.compare("7 2 9 2 5 0 8 3", "1", "1")
    assert text.splitlines()[1] == "sorter-pe: 0 2 2 3 5 7 8 9 (8/8 right)"
    assert np.allclose(np.array(diff.data[0]["z"]), np.array(pe.data[0]["z"]) - np.array(nope.data[0]["z"]), atol=2e-4)
    assert diff.data[0]["zmin"] == -1 and diff.data[0]["zmax"] == 1
    verdict, rows = compare.permutation_test("7 2 9 2 5 0 8 3", 4)
    pe_row, nope_row = rows
    assert pe_row[4] == "no" and pe_row[2] == "0 2 2 3 5 7 8 9"
    assert nope_row[4] == "yes" and float(nope_row[5]) < 1e-5
    assert "sorter-nope: outputs move with the digits" in verdict


def test_accuracy_table_reads_metrics():
    rows = {r[0]: r for r in compare.accuracy_table()}
    assert rows["sorter-pe"][2] >= 0.998
    assert rows["sorter-nope"][2] <= 0.005
    assert rows["ceiling without positions (E[max count]/8)"][1] == pytest.approx(0.2999, abs=1e-4)


# ----- through the API -----------------------------------------------------------------------------
def test_named_endpoints(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/sort", "/compare", "/permutation_test"} <= names


def test_api_sort(client):
    result = client.predict("7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", api_name="/sort")
    assert result[0] == "0 2 2 3 5 7 8 9"


def test_api_compare(client):
    result = client.predict("5 5 5 5 5 5 5 5", "1", "average", api_name="/compare")
    assert "sorter-pe: 5 5 5 5 5 5 5 5 (8/8 right)" in result[0]


@pytest.mark.parametrize("text,message", [("1 2 3", "Got 3 digits"), ("a b c d e f g h", "'a' is not a digit")])
def test_api_bad_input_is_an_app_error_with_the_message(client, text, message):
    with pytest.raises(AppError, match=message):
        client.predict(text, "sorter-pe", "1", "average", api_name="/sort")


def test_api_unknown_model_is_refused(client):
    with pytest.raises((AppError, ValueError)):
        client.predict("7 2 9 2 5 0 8 3", "sorter-xl", "1", "average", api_name="/sort")


translator = pytest.mark.skipif("translator-en-de" not in zoo.available(), reason="translator not trained yet")


@translator
def test_api_translate(client):
    result = client.predict("A man is riding a bicycle.", 5, "", "cross-attention", "1", "average", [],
                            api_name="/translate")
    assert "Mann" in result[0]


@translator
def test_api_translate_refuses_empty(client):
    with pytest.raises(AppError, match="empty"):
        client.predict("   ", 5, "", "cross-attention", "1", "average", [], api_name="/translate")


def test_api_phobert(client):
    result = client.predict("Giảng viên giải thích rất dễ hiểu nhưng phòng học quá nóng", True, 1, 1, None,
                            "subword tokens", api_name="/phobert")
    assert result[0].startswith("Segmented: Giảng_viên giải_thích rất dễ hiểu")
    assert "Tokens (12): <s> | Giảng_viên" in result[0] or "Tokens (" in result[0]


def test_phobert_tab_explains_missing_weights(monkeypatch, tmp_path):
    from ui import phobert as tab
    from zoo import phobert

    monkeypatch.setattr(phobert, "_explorer", phobert.PhobertExplorer(tmp_path / "no-such-folder"))
    with pytest.raises(gr.Error) as err:
        tab.analyze(tab.DEFAULT)
    assert "does not exist" in err.value.message and "PHOBERT_PATH" in err.value.message
    out = tab.on_load(tab.DEFAULT, True, 1, 1, None, "subword tokens")
    assert out[0] == "" and "PhoBERT is not available here" in out[1] and "PHOBERT_PATH" in out[1]
    assert out[2].visible is False and out[9] == []  # empty views hidden; no config, so no breakdown
    assert "What to do" in out[1] and "would also show where its parameters are" in out[1]
    with pytest.raises(gr.Error, match="empty"):  # a user mistake is still a user mistake
        tab.analyze("   ")


def test_phobert_callbacks_on_a_tiny_model(monkeypatch, tmp_path):
    from conftest import write_tiny_phobert

    from ui import phobert as tab
    from zoo import phobert

    monkeypatch.setattr(phobert, "_explorer", phobert.PhobertExplorer(write_tiny_phobert(tmp_path)))
    out = tab.analyze("tôi thích Hà_Nội", False, 2, 1, 99, "words")
    summary, result = out[0], out[-1]
    assert "Words (3): tôi | thích | Hà_Nội" in summary
    assert out[2].visible is True  # the analysis views are shown
    assert out[10].value == len(result.tokens) - 2  # a token the new text lacks falls back to the last word
    fig, top = tab.reselect(result, 2, 2, 1, "subword tokens")
    assert [r[0] for r in top] == ["H1", "H2"] and len(top[0]) == 4
    assert np.allclose(np.array(fig.data[0]["z"]), result.attentions[1, 1], atol=5e-5)
    with pytest.raises(gr.Error, match="Token must be a whole number from 0 to 5"):
        tab.reselect(result, 1, 1, 99, "subword tokens")
    rows = out[8]
    assert len(rows) == 4 and rows[0][:2] == [1, 1]


def test_phobert_offline_shows_the_breakdown_from_its_config(monkeypatch, tmp_path):
    """A PhoBERT folder with its config and tokenizer but no weights: the tab explains what is
    missing, hides the empty views and still counts the parameters from config.json."""
    from conftest import write_tiny_phobert

    from ui import phobert as tab
    from zoo import phobert

    folder = write_tiny_phobert(tmp_path)
    (folder / "model.safetensors").unlink()
    monkeypatch.setattr(phobert, "_explorer", phobert.PhobertExplorer(folder))
    out = tab.on_load(tab.DEFAULT, True, 1, 1, None, "subword tokens")
    assert "PhoBERT is not available here" in out[1] and "computed from the model's config.json alone" in out[1]
    assert out[2].visible is False
    rows = {row[0]: row[1] for row in out[9]}
    expected = phobert.parameter_breakdown(AutoModel.from_config(AutoConfig.from_pretrained(folder)))
    assert rows["total"] == f"{expected['total']:,}" and rows["encoder blocks (2)"] == f"{expected['blocks']:,}"
