"""The app as a separate server process, the way users start it, for the benchmarks that measure it
from outside: start it offline on a free loopback port, read its memory and CPU time, and write
figures into README.md."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port, env_extra=None, timeout=120):
    """Start `python app.py` offline (HF_HUB_OFFLINE=1, an empty Hub cache, no PHOBERT_PATH unless
    env_extra gives one); return (process, seconds until it served its page)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": tempfile.mkdtemp(prefix="hf-empty-"),
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    env.pop("PHOBERT_PATH", None)
    env.update(env_extra or {})
    t0 = time.perf_counter()
    log = tempfile.NamedTemporaryFile("w+", prefix="attention-lab-app-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"app.py exited with {proc.returncode}:\n{log.read()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:  # the page a user opens
                return proc, time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"app.py did not answer within {timeout} s")


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


def rss_mb(pid):
    """Resident memory of a process in MB, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid):
    """User + system CPU time a process has used so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_readme(name, figures, command=None):
    """Replace README.md's block between <!-- name:start --> and <!-- name:end --> with a table."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"README.md has no {start} ... {end} markers")
    table = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    header = f"| measured by `{command or f'python -m benchmarks.{name} --write'}` | |\n| --- | --- |"
    block = f"{start}\n{header}\n{table}\n{end}"
    readme.write_text(text[: text.index(start)] + block + text[text.index(end) + len(end):])
