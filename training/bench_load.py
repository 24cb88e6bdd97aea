"""Load test: 32 concurrent gradio_client users x 25 requests, mixed over /sort, /compare, /translate.

    python -m training.bench_load [--clients 32] [--requests 25] [--write]

Starts `python app.py` offline on a loopback port (nothing leaves the machine), warms it up with
the same concurrency (3 requests per client), then lets every client fire its requests back to back. Reports failures, p50/p95 latency, throughput
and the server's resident memory (RSS) after warm-up and after the load (target: zero failures,
growth <= 20%). Every answer is checked against the answer the same input gets alone. Bounded:
at most --clients x --requests requests and --timeout seconds. With --write the figures go into
README.md's "Reliability and speed" section (between its markers).
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from training.bench_app import free_port, start_app, write_readme

SENTENCES = ["A man is riding a bicycle.", "Two dogs play in the snow.", "A woman in a red coat reads a book.",
             "Children are playing soccer in a park.", "A group of people stand outside a building."]


def rss_mb(pid):
    """Resident memory of a process in MB, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def requests_for(client_id, n, rng):
    """n (api_name, args) pairs mixing the three endpoints, with varied inputs."""
    out = []
    for i in range(n):
        digits = " ".join(str(rng.randrange(10)) for _ in range(8))
        kind = (client_id + i) % 3
        if kind == 0:
            out.append(("/sort", [digits, rng.choice(["sorter-pe", "sorter-nope"]), rng.choice("12"),
                                  rng.choice(["1", "2", "3", "4", "average"]), 6, []]))
        elif kind == 1:
            out.append(("/compare", [digits, rng.choice("12"), "average", 6]))
        else:
            out.append(("/translate", [rng.choice(SENTENCES), rng.choice([1, 3, 5]), "", "cross-attention", "1",
                                       "average", []]))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=25)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    from gradio_client import Client

    port = free_port()
    proc, _ = start_app(port)
    url = f"http://127.0.0.1:{port}/"
    try:
        rng = random.Random(0)
        plans = [requests_for(c, args.requests, rng) for c in range(args.clients)]
        # The answer each distinct request gets alone, to check the answers under load against.
        alone_client = Client(url, verbose=False)
        expected = {}
        for plan in plans:
            for name, a in plan:
                key = (name, repr(a))
                if key not in expected:
                    expected[key] = alone_client.predict(*a, api_name=name)[0]
        latencies, failures, lock = [], [], threading.Lock()

        def user(plan):
            client = Client(url, verbose=False)
            for name, a in plan:
                t0 = time.perf_counter()
                try:
                    answer = client.predict(*a, api_name=name)[0]
                    ok = answer == expected[(name, repr(a))]
                    problem = None if ok else f"{name} answered {answer!r} under load, {expected[(name, repr(a))]!r} alone"
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    problem = f"{name}: {type(e).__name__}: {e}"
                with lock:
                    latencies.append(time.perf_counter() - t0)
                    if problem:
                        failures.append(problem)

        # Warm-up: the same concurrency for a few requests per client, so that every server thread
        # has run every endpoint once; memory is measured from there.
        with ThreadPoolExecutor(args.clients) as pool:
            wait([pool.submit(user, plan[:3]) for plan in plans], timeout=args.timeout)
        latencies.clear()
        rss_before = rss_mb(proc.pid)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            done, pending = wait([pool.submit(user, plan) for plan in plans], timeout=args.timeout)
        wall = time.perf_counter() - t0
        if pending:
            failures.append(f"{len(pending)} clients did not finish within {args.timeout} s")
        rss_after = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    lat = sorted(latencies)
    n = len(lat)
    growth = (rss_after - rss_before) / rss_before
    figures = {
        "requests (clients × requests each)": f"{n} ({args.clients} × {args.requests}), /sort, /compare, /translate mixed",
        "failures (errors, or answers that differ from the same request alone)": str(len(failures)),
        "latency p50 / p95": f"{lat[n // 2] * 1000:.0f} ms / {lat[int(n * 0.95)] * 1000:.0f} ms",
        "throughput": f"{n / wall:.1f} requests/s over {wall:.1f} s",
        "server RSS after warm-up → after load (target growth ≤ 20%)":
            f"{rss_before:.0f} MB → {rss_after:.0f} MB ({growth:+.1%})",
    }
    for k, v in figures.items():
        print(f"{k}: {v}")
    for f in failures[:10]:
        print("  failure:", f)
    checks = {"zero failures": not failures, "rss growth <= 20%": growth <= 0.20}
    for k, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {k}")
    print(f"median latency {statistics.median(lat) * 1000:.0f} ms")
    if args.write:
        write_readme("bench_load", figures)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
