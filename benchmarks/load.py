"""Load test: 32 concurrent gradio_client users x 25 requests, mixed over /sort, /compare, /translate.

    python -m benchmarks.load [--clients 32] [--requests 25] [--write]

Starts `python app.py` offline on a loopback port (nothing leaves the machine), warms it up with
the same concurrency (3 requests per client), then lets every client fire its requests back to
back (closed loop). Reports failures, p50/p95 latency, throughput and the server's resident memory
(RSS) after warm-up and after the load (target: zero failures, growth <= 20%). Every answer is
checked against the answer the same input gets alone. The clients run on the same cores as the
server. Bounded: at most --clients x --requests requests and --timeout seconds. With --write the
figures go into README.md's "Reliability and speed" section (between its markers).
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from benchmarks.server import free_port, rss_mb, start_app, stop, write_readme

SENTENCES = ["A man is riding a bicycle.", "Two dogs play in the snow.", "A woman in a red coat reads a book.",
             "Children are playing soccer in a park.", "A group of people stand outside a building."]


def sort_request(rng):
    digits = " ".join(str(rng.randrange(10)) for _ in range(8))
    return "/sort", [digits, rng.choice(["sorter-pe", "sorter-nope"]), rng.choice("12"),
                     rng.choice(["1", "2", "3", "4", "average"]), 6, []]


def compare_request(rng):
    return "/compare", [" ".join(str(rng.randrange(10)) for _ in range(8)), rng.choice("12"), "average", 6]


def translate_request(rng):
    return "/translate", [rng.choice(SENTENCES), rng.choice([1, 3, 5]), "", "cross-attention", "1", "average", []]


def requests_for(client_id, n, rng):
    """n (api_name, args) pairs taking the three endpoints in turn, with varied inputs."""
    kinds = (sort_request, compare_request, translate_request)
    return [kinds[(client_id + i) % 3](rng) for i in range(n)]


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


class Clients:
    """gradio_client users of one server: the answer each distinct request gets alone, then
    requests under load, each checked against it; latencies and failures are collected."""

    def __init__(self, url, plans):
        from gradio_client import Client

        self.url, self.latencies, self.failures, self.lock = url, [], [], threading.Lock()
        alone = Client(url, verbose=False)
        self.expected = {}
        for plan in plans:
            for name, a in plan:
                key = (name, repr(a))
                if key not in self.expected:
                    self.expected[key] = alone.predict(*a, api_name=name)[0]

    def call(self, client, name, args):
        """One request; its latency and any failure (an error, or another answer than alone) are recorded."""
        t0 = time.perf_counter()
        try:
            answer = client.predict(*args, api_name=name)[0]
            expected = self.expected[(name, repr(args))]
            problem = None if answer == expected else f"{name} answered {answer!r} under load, {expected!r} alone"
        except Exception as e:  # noqa: BLE001 - every failure is counted and shown
            problem = f"{name}: {type(e).__name__}: {e}"
        with self.lock:
            self.latencies.append(time.perf_counter() - t0)
            if problem:
                self.failures.append(problem)

    def user(self, plan, think=None):
        """One user: a fresh session that makes its requests in order, pausing think() seconds between."""
        from gradio_client import Client

        client = Client(self.url, verbose=False)
        for i, (name, args) in enumerate(plan):
            if think and i:
                time.sleep(think())
            self.call(client, name, args)


def closed_loop(url, clients, requests, timeout, pid):
    """Every client fires its requests back to back. Returns (Clients, wall seconds, clients still
    pending at the timeout, the server's RSS after the warm-up in MB)."""
    rng = random.Random(0)
    plans = [requests_for(c, requests, rng) for c in range(clients)]
    load = Clients(url, plans)
    # Warm-up: the same concurrency for a few requests per client, so that every server thread has
    # run every endpoint once; memory is measured from there.
    with ThreadPoolExecutor(clients) as pool:
        wait([pool.submit(load.user, plan[:3]) for plan in plans], timeout=timeout)
    load.latencies.clear()
    rss_warm = rss_mb(pid)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        _, pending = wait([pool.submit(load.user, plan) for plan in plans], timeout=timeout)
    return load, time.perf_counter() - t0, len(pending), rss_warm


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=25)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    port = free_port()
    proc, _ = start_app(port)
    try:
        load, wall, pending, rss_warm = closed_loop(f"http://127.0.0.1:{port}/", args.clients, args.requests,
                                                    args.timeout, proc.pid)
        rss_after = rss_mb(proc.pid)
    finally:
        stop(proc)
    if pending:
        load.failures.append(f"{pending} clients did not finish within {args.timeout} s")
    lat, n = load.latencies, len(load.latencies)
    growth = (rss_after - rss_warm) / rss_warm
    figures = {
        "requests (clients × requests each)":
            f"{n} ({args.clients} × {args.requests}), /sort, /compare, /translate mixed",
        "failures (errors, or answers that differ from the same request alone)": str(len(load.failures)),
        "latency p50 / p95": f"{percentile(lat, 0.5) * 1000:.0f} ms / {percentile(lat, 0.95) * 1000:.0f} ms",
        "throughput": f"{n / wall:.1f} requests/s over {wall:.1f} s",
        "server RSS after warm-up → after load (target growth ≤ 20%)":
            f"{rss_warm:.0f} MB → {rss_after:.0f} MB ({growth:+.1%})",
    }
    for k, v in figures.items():
        print(f"{k}: {v}")
    for f in load.failures[:10]:
        print("  failure:", f)
    checks = {"zero failures": not load.failures, "rss growth <= 20%": growth <= 0.20}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    if args.write:
        write_readme("load", figures)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
