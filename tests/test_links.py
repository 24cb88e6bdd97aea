"""Shareable links: every parameter of every tab against hostile values, generated from the link
table itself, so a parameter a tab adds later is covered without a line here."""

from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest

from ui import links
from ui.common import quote

pytestmark = pytest.mark.app

# What a phishing or injecting link would carry: markup, handlers, script URLs, styled and very long text.
HOSTILE = [
    '<a href="https://example.invalid/login">Session expired: sign in again</a>',
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)><circle r=9></svg>",
    '<iframe src="https://example.invalid"></iframe>',
    "[Sign in again](https://example.invalid/login)",
    "javascript:alert(document.cookie)",
    '<span style="color:red;font-size:40px">Your account is locked</span>',
    "**bold** _em_ `code` # heading",
    "1<b>2</b>",
    "x" * 5000,
    "7 2 9 2 5 0 8 3" + "<img src=x>" * 300,
    "",
    "   ",
    "nan",
    "-1e309",
]


@pytest.fixture(scope="module")
def table(app_url):
    import app  # after app_url: that fixture sets the app's environment before the first import

    return {name: part["params"] for name, part in app.tab_parts.items()}


def cases(table):
    return [(tab, p, v) for tab, params in table.items() for p in params for v in HOSTILE]


def test_every_tab_input_has_a_link_parameter(table):
    import app

    for name, part in app.tab_parts.items():
        assert len({p.name for p in table[name]}) == len(table[name]), name
        if part["render"] is None:  # the playground: a link restores the design; training waits for a click
            assert table[name], name
            continue
        assert [p.component for p in table[name]] == list(part["render"][1]), name  # the order the tab renders in


def test_every_parameter_refuses_or_safely_accepts_hostile_values(table):
    """A value is either refused with a message that says what the parameter accepts (the
    component's rule, or the tab's own check in the words typed input gets) and quotes the value
    as text, or accepted as one the component itself accepts (Gradio's own checks pass)."""
    refused = accepted = 0
    for tab, param, raw in cases(table):
        try:
            value = links.read(param, raw)
        except ValueError as e:
            message = str(e)
            try:
                parsed = links.parse(param.component, raw)
            except ValueError:
                assert message == f"must be {links.accepted(param.component)}; the link gave {quote(raw)}"
            else:
                with pytest.raises(ValueError) as typed:
                    param.check(parsed)
                assert message == str(typed.value)  # the tab's own check, word for word
            assert "<" not in message and ">" not in message, (tab, param.name, message)
            assert len(message) < 400, (tab, param.name, len(message))  # the value is shortened
            refused += 1
            continue
        param.component.preprocess(value)  # raises if the component would refuse it
        if isinstance(param.component, gr.Textbox):  # free text: shown as text, within the box's cap
            assert isinstance(value, str) and len(value) <= (param.component.max_length or links.MAX_TEXT)
        else:  # a choice, number or flag: only an empty list of choices gets through
            assert value == [] and not raw.strip(), (tab, param.name, raw[:40], value)
        accepted += 1
    assert refused > 4 * accepted


@pytest.mark.parametrize("payload", HOSTILE[:7])
def test_restore_keeps_defaults_and_gives_one_escaped_notice(table, payload):
    for tab, params in table.items():
        tab_out, values, notice = links.restore({"tab": tab, **{p.name: payload for p in params}}, table)
        assert tab_out == tab
        refused = [p.name for p in params if p.component not in values]
        assert refused, tab  # markup is never a valid digit, model, layer, ...
        assert notice.count("•") == len(refused) and all(f"• {name}:" in notice for name in refused)
        assert "<" not in notice and ">" not in notice and "&lt;" not in notice  # readable text, no markup
        for component, value in values.items():
            component.preprocess(value)


def test_round_trip_of_every_tab(table):
    """link_query of a tab's current values restores exactly those values."""
    for tab, params in table.items():
        values = [p.component.value for p in params]
        query = links.link_query(tab, params, *values)
        restored_tab, restored, notice = links.restore(dict(parse_qsl(urlsplit(query).query)), table)
        assert restored_tab == tab and notice == ""
        for p, v in zip(params, values, strict=True):
            if v not in (None, "", []):
                assert restored[p.component] == v, (tab, p.name)


def test_link_without_a_tab_changes_nothing_and_an_unknown_tab_is_named(table):
    assert links.restore({}, table) == (None, {}, "")
    assert links.restore({"digits": "1"}, table) == (None, {}, "")
    tab, values, notice = links.restore({"tab": "<b>x</b>", "digits": "1"}, table)
    assert tab is None and values == {} and "tab: must be one of: sorter, compare" in notice
    assert "‹b›x‹/b›" in notice


def test_rules_read_the_components():
    with gr.Blocks():
        radio = gr.Radio([("With positions", "pe"), ("Without", "nope")], value="pe")
        slider = gr.Slider(0, 6, value=6, step=2)
        number = gr.Number(0, precision=0, minimum=0, maximum=10)
        group = gr.CheckboxGroup(["L1H1", "L1H2"])
        flag = gr.Checkbox(True)
        box = gr.Textbox(max_length=5)
    read = lambda c, raw: links.read(links.Param("p", c), raw)  # noqa: E731
    assert read(radio, "nope") == "nope" and read(slider, "4") == 4 and read(number, "10") == 10
    assert read(group, "L1H2, L1H1") == ["L1H2", "L1H1"] and read(flag, "off") is False and read(box, "abc") == "abc"
    for component, raw, message in [(radio, "With positions", "must be one of: pe, nope"),
                                    (slider, "3", "must be a number from 0 to 6 in steps of 2"),
                                    (slider, "8", "from 0 to 6"), (number, "2.5", "whole number from 0 to 10"),
                                    (group, "L1H1,L1H1", "comma-separated list of: L1H1, L1H2"),
                                    (flag, "maybe", "1 or 0"), (box, "abcdef", "at most 5 characters")]:
        with pytest.raises(ValueError, match=message):
            read(component, raw)
    with gr.Blocks():
        with pytest.raises(TypeError, match="no rule for a ColorPicker"):
            links.accepted(gr.ColorPicker())


def test_api_callers_get_escaped_worded_errors(client):
    """The same markup sent through the API: refused in words, quoted as text, never as markup."""
    from gradio_client.exceptions import AppError

    payload = HOSTILE[0]
    calls = [("/sort", [payload, "sorter-pe", "1", "average", 6, []], "is not a digit. Use the digits 0-9 only"),
             ("/sort", ["7 2 9 2 5 0 8 3", payload, "1", "average", 6, []], "Model must be one of: sorter-pe"),
             ("/sort", ["7 2 9 2 5 0 8 3", "sorter-pe", payload, "average", 6, []], "Layer must be one of: 1, 2"),
             ("/sort", ["7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", payload, []],
              "Training snapshot must be a whole number from 0 to 6"),
             ("/sort", ["7 2 9 2 5 0 8 3", "sorter-pe", "1", "average", 6, [payload]], "Unknown head"),
             ("/compare", ["7 2 9 2 5 0 8 3", "1", payload, 6], "Head must be one of: 1, 2, 3, 4, average"),
             ("/translate", ["A dog.", 5, "", payload, "1", "average", []],
              "Attention must be one of: cross-attention"),
             ("/phobert", ["Xin chào", True, 1, 1, None, payload], "View must be one of: subword tokens, words")]
    for name, args, expected in calls:
        with pytest.raises(AppError) as err:
            client.predict(*args, api_name=name)
        message = str(err.value)
        assert expected in message and "‹a" in message, (name, message)  # the input, quoted as text
        assert "<a" not in message and "</a>" not in message, (name, message)


def test_every_event_leaves_input_checks_to_the_callbacks(table):
    """Gradio's own input checks quote a refused value into an HTML toast, so every event with a
    Python callback skips them (ui.common.on); gr.Examples' own events read only a row index."""
    import app

    events = [fn for fn in app.demo.fns.values() if fn.fn is not None]
    ours = [fn for fn in events if not any(isinstance(c, gr.Dataset) for c in fn.inputs)]
    assert len(ours) >= 30
    assert [fn.name for fn in ours if fn.preprocess] == []
