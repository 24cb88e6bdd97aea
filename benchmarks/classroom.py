"""The classroom: a teacher shares the link and a class opens it at once.

    python -m benchmarks.classroom [--students 60] [--pages 10] [--write]

Two servers run side by side on loopback, offline: the app (`python app.py`) and the floor, a
one-plot Gradio app on the same framework (benchmarks/floor_app.py). Measured, in this order:

1. Per visit, alternating the two apps: headless Chromium opens the page in a fresh profile (a new
   student), and we time navigation -> first heatmap visible, count the queue events the page load
   triggers, and read the server's CPU time it cost (medians of --visits).
2. Server CPU per interaction: /sort against the floor's click (/predict), means of --calls.
3. The class: --students gradio_client students join at even intervals within --join seconds; each
   makes 6 interactions (50% /sort, 20% /compare, 30% /translate, inputs drawn with a fixed seed) with
   4-8 s of think time between them, every answer checked against the one the same request gets
   alone. Meanwhile --pages real page loads run one at a time in Chromium. Server RSS is read after
   every endpoint has been warmed, and after the class.
4. Memory per visitor: 40 page loads one after another, each closed once it rendered; RSS after the
   first 5, after all 40, and after 20 s idle.
5. Disk per visitor: 30 exports through the API against a server whose cache keeps files for a few
   seconds (ATTENTION_LAB_CACHE_SECONDS): the files in Gradio's cache after them, and once the
   cache has been cleaned.
6. Closed loop: benchmarks.load's 32 clients x 25 requests, back to back.

The simulated students, the browser and both servers share this machine's cores: the figures are
what one 2-core machine does with all of it at once. With --write they go into README.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import httpx

from benchmarks import load
from benchmarks.server import ROOT, cpu_seconds, free_port, rss_mb, start_app, stop, write_readme

CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
APP_HEATMAP, FLOOR_HEATMAP = "#sorter-heatmap", "#floor-heatmap"


def start_floor(port):
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.floor_app", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the floor app did not start")


class Browser:
    """One headless Chromium; each visit is a fresh profile, like a student opening the link."""

    def __init__(self, chromium):
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.browser = self.playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)

    def visit(self, url, heatmap, settle=1.5):
        """(seconds to the first heatmap, queue events the page load triggered)."""
        context = self.browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        joins = []
        page.on("request", lambda r: joins.append(r.url) if "queue/join" in r.url else None)
        t0 = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_selector(f"{heatmap} .js-plotly-plot .heatmaplayer", timeout=60_000)
        seconds = time.perf_counter() - t0
        page.wait_for_timeout(settle * 1000)  # events a page load starts late still count
        context.close()
        return seconds, len(joins)

    def close(self):
        self.browser.close()
        self.playwright.stop()


def per_visit(browser, servers, visits):
    """Alternating the apps: {name: {first heatmap s, queue events, server CPU s}}, medians."""
    samples = {name: [] for name in servers}
    for i in range(visits + 1):
        for name, (url, pid, heatmap) in servers.items():
            c0 = cpu_seconds(pid)
            seconds, events = browser.visit(url, heatmap)
            if i:  # the first visit of each warms the server and the browser's caches of the machine
                samples[name].append((seconds, events, cpu_seconds(pid) - c0))
    return {name: {"first_heatmap_s": statistics.median(s for s, _, _ in rows),
                   "queue_events": statistics.median(e for _, e, _ in rows),
                   "server_cpu_s": statistics.median(c for _, _, c in rows)} for name, rows in samples.items()}


def cpu_per_call(url, pid, api_name, args_for, calls):
    """Mean server CPU seconds per call (the kernel counts CPU in 10 ms ticks: means of many calls)."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    for i in range(3):
        client.predict(*args_for(i), api_name=api_name)
    c0 = cpu_seconds(pid)
    for i in range(calls):
        client.predict(*args_for(i), api_name=api_name)
    return (cpu_seconds(pid) - c0) / calls


def student_plan(rng):
    """6 interactions: 50% /sort, 20% /compare, 30% /translate."""
    kinds = rng.choices([load.sort_request, load.compare_request, load.translate_request], [5, 2, 3], k=6)
    return [kind(rng) for kind in kinds]


def classroom(url, browser, students, join_s, pages):
    """The class and the page loads beside it. Returns (Clients, page first-heatmap seconds)."""
    rng = random.Random(0)
    plans = [student_plan(rng) for _ in range(students)]
    clients = load.Clients(url, plans)
    page_times = []

    def pages_meanwhile():
        for _ in range(pages):
            page_times.append(browser.visit(url, APP_HEATMAP, settle=0.5)[0])
            time.sleep(join_s / pages)

    def student(i, plan):
        time.sleep(i * join_s / students)
        think = random.Random(i)
        clients.user(plan, think=lambda: think.uniform(4, 8))

    with ThreadPoolExecutor(students) as pool:
        futures = [pool.submit(student, i, plan) for i, plan in enumerate(plans)]
        pages_meanwhile()  # the browser lives on this thread
        wait(futures)
    return clients, page_times


def memory_per_visitor(browser, url, pid, visits=40):
    """RSS (MB) after 5 sequential page loads, after all of them, and after 20 s idle."""
    after = {}
    for i in range(1, visits + 1):
        browser.visit(url, APP_HEATMAP, settle=0.2)
        if i == 5:
            after["after 5"] = rss_mb(pid)
    after[f"after {visits}"] = rss_mb(pid)
    time.sleep(20)
    after["after 20 s idle"] = rss_mb(pid)
    return after


def disk_per_visitor(exports=30, keep_s=6):
    """Files in Gradio's cache after `exports` exports, and once its cleaning (every keep_s / 3 s,
    of files older than keep_s) has run."""
    from gradio_client import Client

    cache = Path(tempfile.mkdtemp(prefix="attention-lab-cache-"))
    port = free_port()
    proc, _ = start_app(port, {"GRADIO_TEMP_DIR": str(cache), "ATTENTION_LAB_CACHE_SECONDS": str(keep_s)})
    count = lambda: sum(1 for p in cache.rglob("*") if p.is_file())  # noqa: E731
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        for i in range(exports):
            client.predict(f"7 2 9 2 5 0 8 {i % 10}", "sorter-pe", "1", "average", 6, [], api_name="/sort_export")
        during = count()
        time.sleep(keep_s * 2 + 2)
        return during, count()
    finally:
        stop(proc)


def warm(url, browser):
    """Every endpoint the class uses, and a page load, once."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    rng = random.Random(1)
    for request in (load.sort_request(rng), load.compare_request(rng), load.translate_request(rng)):
        client.predict(*request[1], api_name=request[0])
    browser.visit(url, APP_HEATMAP)


def ratio(a, b):
    return f"{a:.2f} / {b:.2f} ({a / b:.2f}x)"


def figures_of(args, visit, cpu, clients, page_times, rss, memory, disk, closed):
    """The figures, as README rows."""
    ours, floor = visit["app"], visit["floor"]
    loop, loop_wall = closed[0], closed[1]
    lat = clients.latencies
    pct = lambda values, q, scale=1000: load.percentile(values, q) * scale  # noqa: E731
    return {
        "per visit, app / floor: first heatmap visible (s)": ratio(ours["first_heatmap_s"], floor["first_heatmap_s"]),
        "per visit, app / floor: queue events of a page load":
            f"{ours['queue_events']:.0f} / {floor['queue_events']:.0f}",
        "per visit, app / floor: server CPU (s)": ratio(ours["server_cpu_s"], floor["server_cpu_s"]),
        "server CPU per /sort, app / the floor's click (ms)": ratio(cpu["app"] * 1000, cpu["floor"] * 1000),
        f"class: {args.students} students joining within {args.join:.0f} s, 6 interactions each":
            f"{len(lat)} interactions, {len(clients.failures)} failures, p50 {pct(lat, 0.5):.0f} ms, "
            f"p95 {pct(lat, 0.95):.0f} ms",
        f"class: {len(page_times)} page loads meanwhile, first heatmap":
            f"p50 {pct(page_times, 0.5, 1):.2f} s, p95 {pct(page_times, 0.95, 1):.2f} s",
        "class: server RSS warmed → after": f"{rss[0]:.0f} MB → {rss[1]:.0f} MB ({rss[1] / rss[0]:.2f}x)",
        "memory: 40 page loads one after another (RSS)": " → ".join(f"{v:.0f} MB {k}" for k, v in memory.items()),
        "disk: files in Gradio's cache after 30 exports → after its cleaning": f"{disk[0]} → {disk[1]}",
        "closed loop: 32 clients × 25 requests": f"p50 {pct(loop.latencies, 0.5):.0f} ms, "
                                                f"p95 {pct(loop.latencies, 0.95):.0f} ms, "
                                                f"{len(loop.latencies) / loop_wall:.1f} requests/s, "
                                                f"{len(loop.failures)} failures",
    }


def checks_of(visit, cpu, clients, page_times, rss, memory, disk):
    """The issue's bars."""
    ours, floor, mem = visit["app"], visit["floor"], list(memory.values())
    return {"page CPU <= 1.5x the floor's": ours["server_cpu_s"] <= 1.5 * floor["server_cpu_s"],
            "first heatmap <= the floor's + 0.5 s": ours["first_heatmap_s"] <= floor["first_heatmap_s"] + 0.5,
            "/sort CPU <= 2x the floor's": cpu["app"] <= 2 * cpu["floor"],
            "class: 0 failures": not clients.failures,
            "class: interaction p95 <= 1 s": load.percentile(clients.latencies, 0.95) <= 1.0,
            "class: page first heatmap p95 <= 3 s": load.percentile(page_times, 0.95) <= 3.0,
            "class: RSS after <= 1.2x warmed": rss[1] <= 1.2 * rss[0],
            "memory: 40 page loads grow RSS <= 10 MB after the first 5": mem[1] - mem[0] <= 10,
            "disk: the cache shrinks back": disk[1] < disk[0]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--students", type=int, default=60)
    p.add_argument("--join", type=float, default=30, help="seconds over which the students join")
    p.add_argument("--pages", type=int, default=10, help="browser page loads during the class")
    p.add_argument("--visits", type=int, default=8, help="page loads per app for the per-visit figures")
    p.add_argument("--calls", type=int, default=40, help="calls per app for the CPU per interaction")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    app_port, floor_port = free_port(), free_port()
    app_proc, _ = start_app(app_port)
    floor_proc = start_floor(floor_port)
    app_url, floor_url = f"http://127.0.0.1:{app_port}/", f"http://127.0.0.1:{floor_port}/"
    browser = Browser(args.chromium)
    try:
        visit = per_visit(browser, {"app": (app_url, app_proc.pid, APP_HEATMAP),
                                    "floor": (floor_url, floor_proc.pid, FLOOR_HEATMAP)}, args.visits)
        digits = lambda i: f"7 2 9 2 5 0 8 {i % 10}"  # noqa: E731
        cpu = {"app": cpu_per_call(app_url, app_proc.pid, "/sort",
                                   lambda i: [digits(i), "sorter-pe", "1", "average", 6, []], args.calls),
               "floor": cpu_per_call(floor_url, floor_proc.pid, "/predict", lambda i: [digits(i)], args.calls)}
        stop(floor_proc)
        warm(app_url, browser)
        rss_warm = rss_mb(app_proc.pid)
        class_run, page_times = classroom(app_url, browser, args.students, args.join, args.pages)
        rss = (rss_warm, rss_mb(app_proc.pid))
        memory = memory_per_visitor(browser, app_url, app_proc.pid)
        closed = load.closed_loop(app_url, 32, 25, 900, app_proc.pid)
    finally:
        browser.close()
        stop(app_proc)
        if floor_proc.poll() is None:
            stop(floor_proc)
    disk = disk_per_visitor()
    figures = figures_of(args, visit, cpu, class_run, page_times, rss, memory, disk, closed)
    checks = checks_of(visit, cpu, class_run, page_times, rss, memory, disk)
    for k, v in figures.items():
        print(f"{k}: {v}")
    for f in class_run.failures[:10]:
        print("  failure:", f)
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    if args.write:
        write_readme("classroom", figures)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
