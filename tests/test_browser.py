"""End to end in a real browser: Debian's Chromium driven by Playwright, one test per tab.

Screenshots of every tab land in artifacts/screenshots/. Outside CI a machine without Chromium
skips these tests; in CI (CI=1, set by .ci/run) a missing browser is a failure.
"""

import os
import shutil
from pathlib import Path

import pytest

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
    return page.locator(f"#{elem_id} .js-plotly-plot .heatmaplayer, #{elem_id} .js-plotly-plot .barlayer").count()


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
