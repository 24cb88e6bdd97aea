"""End to end in a real browser: Debian's Chromium driven by Playwright, one test per tab.

Screenshots of every tab land in artifacts/screenshots/. Outside CI a machine without Chromium
skips these tests; in CI (CI=1, set by .ci/run) a missing browser is a failure.
"""

import os
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest

from ui import translator as translator_tab

pytestmark = pytest.mark.browser
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


def chromium_path():
    path = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    message = "Chromium not found: apt-get install -y chromium (or set CHROMIUM_PATH)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api") if not os.environ.get("CI") else \
        __import__("playwright.sync_api", fromlist=["sync_playwright"])
    path = chromium_path()
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(app_url, wait_until="domcontentloaded")
    pg.wait_for_selector("gradio-app .tabs, gradio-app [role=tablist]", timeout=60_000)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def open_tab(page, name):
    page.get_by_role("tab", name=name).click()


def open_box(page, elem_id):
    """Open a closed gr.Accordion by its header."""
    page.locator(f"#{elem_id} .label-wrap").first.click()


def textbox(page, elem_id):
    return page.locator(f"#{elem_id} textarea, #{elem_id} input").first


def wait_value(page, elem_id, predicate_js, timeout=30_000):
    """Wait until the textbox's value satisfies a JS predicate over `v`."""
    page.wait_for_function(
        f"() => {{ const e = document.querySelector('#{elem_id} textarea, #{elem_id} input');"
        f" if (!e) return false; const v = e.value; return {predicate_js}; }}", timeout=timeout)
    return textbox(page, elem_id).input_value()


def plot_rendered(page, elem_id):
    page.wait_for_selector(f"#{elem_id} .js-plotly-plot .main-svg", timeout=30_000)
    layers = ", ".join(f"#{elem_id} .js-plotly-plot .{kind}" for kind in ("heatmaplayer", "barlayer", "scatterlayer"))
    return page.locator(layers).count()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_sorter_tab(page):
    open_tab(page, "Sorter")
    # the page opens with the default example already rendered
    assert wait_value(page, "sorter-answer", "v === '0 2 2 3 5 7 8 9'") == "0 2 2 3 5 7 8 9"
    box = textbox(page, "sorter-input")
    box.fill("9 8 7 6 5 4 3 2")
    page.locator("#sorter-run").click()
    assert wait_value(page, "sorter-answer", "v === '2 3 4 5 6 7 8 9'") == "2 3 4 5 6 7 8 9"
    assert page.locator("#sorter-marks .digit.ok").count() == 8
    assert plot_rendered(page, "sorter-heatmap") >= 1
    assert plot_rendered(page, "sorter-overview") >= 1
    shot(page, "sorter")
    box.fill("1 2 3")
    page.locator("#sorter-run").click()
    page.get_by_text("Got 3 digits; the sorter takes exactly 8").first.wait_for(timeout=15_000)


def test_compare_tab(page):
    open_tab(page, "PE vs no-PE")
    wait_value(page, "compare-answer", "v.includes('sorter-nope')")
    page.locator("#compare-shuffle").click()
    result = wait_value(page, "compare-perm-result", "v.includes('sorter-nope: outputs move with the digits')")
    assert "sorter-pe: outputs do not move with the digits" in result
    for elem in ("compare-pe", "compare-nope", "compare-diff"):
        assert plot_rendered(page, elem) >= 1
    plot_rendered(page, "compare-loss")
    shot(page, "compare")


def test_sorter_snapshot_ablation_and_download(page):
    open_tab(page, "Sorter")
    wait_value(page, "sorter-note", "v.includes('final model')")
    slider = page.locator("#sorter-snapshot input[type=number]")
    slider.fill("0")
    slider.press("Enter")
    page.locator("#sorter-snapshot input[type=range]").dispatch_event("pointerup")
    wait_value(page, "sorter-note", "v.includes('training step 0 of 1500')")
    slider.fill("6")
    slider.press("Enter")
    page.locator("#sorter-snapshot input[type=range]").dispatch_event("pointerup")
    wait_value(page, "sorter-note", "v.includes('final model')")
    page.locator("#sorter-ablate").get_by_label("L2H1").check()
    note = wait_value(page, "sorter-note", "v.includes('Switched off L2H1')")
    assert "1,000 fixed sequences" in note
    open_box(page, "sorter-share")
    page.locator("#sorter-export").click()
    link = page.locator("#sorter-files a[download$='.json']").first
    link.wait_for(timeout=30_000)
    assert page.locator("#sorter-files a[download$='.png']").count() == 1
    with page.expect_download() as download:
        link.click()
    data = open(download.value.path(), encoding="utf-8").read()
    assert '"format": "attention-lab/attention-view@1"' in data and '"query_tokens"' in data
    shot(page, "sorter-ablation")


def test_shared_link_restores_tab_and_inputs(browser, app_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.goto(app_url + "?tab=compare&digits=4+4+1+9+1+4+0+9&layer=2&head=3", wait_until="domcontentloaded")
    answer = wait_value(pg, "compare-answer", "v.includes('true sort: 0 1 1 4 4 4 9 9')")
    assert "sorter-pe: 0 1 1 4 4 4 9 9" in answer
    assert textbox(pg, "compare-input").input_value() == "4 4 1 9 1 4 0 9"
    assert pg.locator("#compare-layer input[value='2']").is_checked()
    assert pg.get_by_role("tab", name="PE vs no-PE").get_attribute("aria-selected") == "true"
    open_box(pg, "compare-share")
    pg.locator("#compare-link-button").click()
    link = wait_value(pg, "compare-link", "v.startsWith('http')")
    assert "tab=compare" in link and "digits=4+4+1+9+1+4+0+9" in link and "layer=2" in link
    context.close()


translator = pytest.mark.skipif("translator-en-de" not in __import__("zoo").available(),
                                reason="translator not trained yet")


@translator
def test_translator_tab(page):
    open_tab(page, "Translator")
    wait_value(page, "translator-output", "v.length > 0")
    box = textbox(page, "translator-input")
    box.fill("A man is riding a bicycle.")
    textbox(page, "translator-reference").fill("Ein Mann fährt Fahrrad.")
    page.locator("#translator-run").click()
    german = wait_value(page, "translator-output", "v.includes('Mann')")
    assert "Mann" in german
    assert plot_rendered(page, "translator-cross") >= 1
    assert plot_rendered(page, "translator-step-plot") >= 1
    wait_value(page, "translator-ref-summary", "v.includes('perplexity')")
    step = page.locator("#translator-step input[type=number]")
    step.fill("2")
    step.press("Enter")
    page.wait_for_function("() => document.querySelector('#translator-step-plot .gtitle')?.textContent"
                           ".includes('Step 2/')", timeout=30_000)
    shot(page, "translator")
    if translator_tab.SNAPSHOT_EPOCHS:  # replay training: the first snapshot, then back to the final model
        wait_value(page, "translator-note", "v.startsWith('Final model')")
        snapshot = page.locator("#translator-snapshot input[type=number]")
        snapshot.fill("0")
        snapshot.press("Enter")
        page.locator("#translator-snapshot input[type=range]").dispatch_event("pointerup")
        first = translator_tab.SNAPSHOT_EPOCHS[0]
        wait_value(page, "translator-note", f"v.startsWith('Snapshot after epoch {first} ')")
        shot(page, "translator-snapshot")


def test_phobert_tab(page):
    open_tab(page, "PhoBERT heads")
    tokens = wait_value(page, "phobert-output", "v.includes('Giảng_viên')")
    assert "<s> | Giảng_viên | giải_thích" in tokens or "Giảng_viên" in tokens
    assert plot_rendered(page, "phobert-overview") >= 1
    assert plot_rendered(page, "phobert-heatmap") >= 1
    shot(page, "phobert")


def test_basics_tab(page):
    open_tab(page, "Attention basics")
    assert plot_rendered(page, "basics-qkv-weights") >= 1
    page.locator("#basics-qkv-table").get_by_text("0.32").first.wait_for(timeout=30_000)
    assert plot_rendered(page, "basics-pe-heatmap") >= 1
    shot(page, "basics")


def test_html_in_tokens_is_shown_as_text(page):
    """Token text and error messages containing HTML are displayed, never run."""
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_tab(page, "PhoBERT heads")
    wait_value(page, "phobert-output", "v.includes('Giảng_viên')")
    textbox(page, "phobert-input").fill("<img src=x onerror=alert(1)> <b>đậm</b>")
    page.locator("#phobert-run").click()
    wait_value(page, "phobert-output", "v.includes('onerror')")
    page.wait_for_function("() => [...document.querySelectorAll('#phobert-heatmap .xtick text')]"
                           ".some(t => t.textContent.includes('<'))", timeout=30_000)
    open_tab(page, "Sorter")
    textbox(page, "sorter-input").fill("<img src=x onerror=alert(2)>")
    page.locator("#sorter-run").click()
    page.get_by_text("is not a digit").first.wait_for(timeout=15_000)
    page.wait_for_timeout(500)
    assert page.locator("img[src='x']").count() == 0 and page.locator("#phobert-heatmap b").count() == 0
    assert dialogs == []


# Markup a phishing link would carry; every element it could create has an id starting "pwn".
LINK_PAYLOADS = [
    '<a id="pwn-a" href="https://example.invalid/login">Session expired: sign in again</a><img id="pwn-img" src=x '
    'onerror=alert(1)>',
    '<svg id="pwn-svg" onload=alert(2)></svg><iframe id="pwn-frame" src="https://example.invalid"></iframe>',
    '[Sign in again](javascript:alert(3)) <span id="pwn-span" style="color:red">Your account is locked</span>',
]
TAB_PLOTS = {"sorter": "sorter-heatmap", "compare": "compare-pe", "translator": "translator-cross",
             "phobert": "phobert-heatmap"}
INJECTED = ("document.querySelectorAll('[id^=pwn], a[href^=\"javascript\"], a[href*=\"example.invalid\"], "
            "iframe[src*=\"example.invalid\"]').length")


@pytest.mark.parametrize("payload", LINK_PAYLOADS)
@pytest.mark.parametrize("tab", list(TAB_PLOTS))
def test_hostile_link_opens_the_tab_with_a_text_notice(browser, app_url, tab, payload):
    """Every parameter of the tab set to the payload: the tab still renders, one notice names the
    refused parameters as text, and nothing of the payload becomes an element or a dialog."""
    import app

    params = app.tab_parts[tab]["params"]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.goto(app_url + "?" + urlencode({"tab": tab, **{p.name: payload for p in params}}), wait_until="domcontentloaded")
    assert plot_rendered(pg, TAB_PLOTS[tab]) >= 1
    toast = pg.locator("[data-testid=toast-text]").filter(has_text="defaults are shown instead").first
    toast.wait_for(timeout=30_000)
    text = toast.inner_text()
    refused = [p.name for p in params if f"{p.name}:" in text]
    assert len(refused) >= 2 and "must be" in text
    assert pg.evaluate(INJECTED) == 0 and dialogs == []
    context.close()


def queue_events(pg):
    """A list that fills with the queue events the page sends from now on."""
    joins = []
    pg.on("request", lambda r: joins.append(r.url) if "queue/join" in r.url else None)
    return joins


def test_a_page_load_does_only_the_visible_tabs_work(browser, app_url):
    """Opening the page sends no event: the first tab's default view is in the page. Each other tab
    is filled by one event the first time it is opened."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    joins = queue_events(pg)
    pg.goto(app_url, wait_until="domcontentloaded")
    assert plot_rendered(pg, "sorter-heatmap") >= 1 and plot_rendered(pg, "sorter-overview") >= 1
    assert wait_value(pg, "sorter-answer", "v.length > 0") == "0 2 2 3 5 7 8 9"
    pg.wait_for_timeout(2000)
    assert joins == []
    for name, elem, plot in [("PE vs no-PE", "compare-answer", "compare-pe"),
                             ("Translator", "translator-output", "translator-cross")]:
        before = len(joins)
        open_tab(pg, name)
        wait_value(pg, elem, "v.length > 0")
        assert plot_rendered(pg, plot) >= 1
        pg.wait_for_timeout(500)
        assert len(joins) == before + 1, name
    context.close()


PHONE = {"width": 390, "height": 844}


@pytest.mark.parametrize("tab,plot", [("sorter", "sorter-heatmap"), ("compare", "compare-pe"),
                                      ("translator", "translator-cross"), ("phobert", "phobert-heatmap"),
                                      ("basics", "basics-qkv-weights")])
def test_every_tab_on_a_phone(browser, app_url, tab, plot):
    """390 px wide: the page never scrolls sideways (plots scroll in their own box), heatmap cells
    keep a readable size, and the overview's titles do not overlap."""
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    pg = context.new_page()
    pg.goto(app_url + ("" if tab == "sorter" else f"?tab={tab}"), wait_until="domcontentloaded")
    assert plot_rendered(pg, plot) >= 1
    pg.wait_for_timeout(1000)
    assert pg.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    cell = pg.evaluate(f"""() => {{
        const box = document.querySelector('#{plot} .nsewdrag').getBoundingClientRect();
        const ticks = [...document.querySelectorAll('#{plot} .xaxislayer-above .xtick')];
        const cols = ticks.filter(t => t.textContent).length;
        return box.width / Math.max(cols, 1); }}""")
    assert cell >= 20, cell
    if tab == "sorter":
        boxes = pg.evaluate("""() => [...document.querySelectorAll('#sorter-overview .annotation-text')]
            .map(e => e.getBoundingClientRect()).map(r => [r.left, r.right, r.top, r.bottom])""")
        assert len(boxes) == 10
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2], (a, b)  # no two overlap
    shot(pg, f"phone-{tab}")
    context.close()


def test_playground_trains_live_and_probes(page):
    open_tab(page, "Train it yourself")
    steps = page.locator("#play-steps input[type=number]")
    steps.fill("300")
    steps.press("Enter")
    page.locator("#play-train").click()
    updates = set()
    page.wait_for_function("() => (document.querySelector('#play-status textarea')?.value || '').includes('step ')",
                           timeout=60_000)
    for _ in range(200):  # watch the status move while it trains
        updates.add(textbox(page, "play-status").input_value().split(";")[-1].split(",")[0])
        if "per-position accuracy" in textbox(page, "play-status").input_value():
            break
        page.wait_for_timeout(100)
    status = wait_value(page, "play-status", "v.includes('whole-sequence accuracy')", timeout=120_000)
    assert "step 300 of 300" in status and len(updates) >= 2
    assert plot_rendered(page, "play-curves") >= 1 and plot_rendered(page, "play-attention") >= 1
    assert page.locator("#play-marks .digit").count() == 8
    textbox(page, "play-probe-input").fill("9 8 7 6 5 4 3 2")
    page.locator("#play-probe").click()
    assert wait_value(page, "play-probe-output", "v.startsWith('input 9 8 7 6 5 4 3 2 -> output')")
    assert plot_rendered(page, "play-probe-attention") >= 1
    shot(page, "playground")


def test_explanation_boxes_test_attention_on_request(page):
    """The closed "Is attention an explanation?" boxes: nothing is computed until asked; then a line
    per method, the scores over the input and the deletion curves."""
    open_tab(page, "Sorter")
    wait_value(page, "sorter-answer", "v === '0 2 2 3 5 7 8 9'")
    open_box(page, "sorter-explain")
    assert textbox(page, "sorter-explain-text").input_value() == ""
    page.locator("#sorter-explain-run").click()
    text = wait_value(page, "sorter-explain-text", "v.includes('leave-one-out: Spearman')")
    assert text.startswith("sorter-pe, output position 0: predicted 0")
    assert plot_rendered(page, "sorter-explain-scores") >= 1 and plot_rendered(page, "sorter-explain-curves") >= 1
    shot(page, "sorter-explain")
    if "translator-en-de" not in __import__("zoo").available():
        return
    open_tab(page, "Translator")
    wait_value(page, "translator-output", "v.length > 0")
    textbox(page, "translator-input").fill("A dog runs.")
    textbox(page, "translator-reference").fill("")  # explain the model's own translation
    page.locator("#translator-run").click()
    wait_value(page, "translator-output", "v.includes('Hund')")
    open_box(page, "translator-explain")
    page.locator("#translator-explain-all").click()
    page.locator("#translator-explain-every").get_by_text("Hund").first.wait_for(timeout=60_000)
    page.locator("#translator-explain-run").click()
    text = wait_value(page, "translator-explain-text", "v.includes('integrated gradients:')", timeout=60_000)
    assert text.startswith("output step 0 of the model's translation: 'Ein'"), text
    assert plot_rendered(page, "translator-explain-scores") >= 1
    shot(page, "translator-explain")


def test_translator_heads_and_contrast_views_on_request(page):
    """The closed "Which heads matter?" and "Why this word and not that one?" boxes: each computes on
    its own button only, then shows its text and figures."""
    if "translator-en-de" not in __import__("zoo").available():
        pytest.skip("translator not trained")
    open_tab(page, "Translator")
    wait_value(page, "translator-output", "v.length > 0")
    assert "mean token log-probability" in textbox(page, "translator-familiarity").input_value()
    textbox(page, "translator-input").fill("A dog runs in the snow.")
    page.locator("#translator-run").click()
    wait_value(page, "translator-output", "v.includes('Hund')")
    open_box(page, "translator-heads-box")
    assert textbox(page, "translator-heads-text").input_value() == ""
    page.locator("#translator-heads-run").click()
    text = wait_value(page, "translator-heads-text", "v.includes('lower it most')", timeout=60_000)
    assert text.startswith("Translation: Ein Hund rennt im Schnee.")
    assert plot_rendered(page, "translator-heads-grid") >= 1
    shot(page, "translator-heads")
    open_box(page, "translator-contrast-box")
    textbox(page, "translator-contrast-alt").fill("Katze")
    page.locator("#translator-contrast-run").click()
    text = wait_value(page, "translator-contrast-explain-text", "v.includes('Attention is the same')", timeout=60_000)
    assert "'▁Katze' has p = " in text
    assert plot_rendered(page, "translator-contrast-explain-scores") >= 1
    shot(page, "translator-contrast")
