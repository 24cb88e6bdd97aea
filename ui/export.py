"""Download any attention view: JSON and CSV (tokens + weights), SVG and PNG (the heatmap).

The images are drawn here, without a browser (plotly's static export needs Chrome, which a Space
does not have), with the same colour scale as the on-screen heatmaps. The JSON format is
documented in README.md ("Export format").
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
import threading
import time
import uuid
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from plotly.colors import sample_colorscale

FORMAT = "attention-lab/attention-view@1"
EXPORT_DIR = Path(tempfile.mkdtemp(prefix="attention-lab-export-"))
# Gradio copies what a callback returns into its own cache; both copies are deleted after this long
# (app.py gives Gradio the same age), so exports do not fill the disk.
KEEP_SECONDS = int(os.environ.get("ATTENTION_LAB_CACHE_SECONDS", 15 * 60))
CELL, MARGIN, MAX_SIDE = 36, 120, 1400  # cells shrink so the map stays within MAX_SIDE pixels
_cleanup_lock = threading.Lock()
FONT_PATHS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "DejaVuSans.ttf"]


# 256-step lookup tables of the on-screen scales: Blues on 0..1, reversed RdBu on -1..1 (differences)
_LUT = {diff: np.array([[int(c) for c in re.findall(r"\d+", css)[:3]]
                       for css in sample_colorscale("RdBu_r" if diff else "Blues", list(np.linspace(0, 1, 256)))],
                      dtype=np.uint8)
        for diff in (False, True)}


def colours(weights, diff=False):
    """(T_q, T_k, 3) uint8 colours of the cells, as the heatmap on screen draws them."""
    v = (np.asarray(weights, dtype=float) + 1) / 2 if diff else np.asarray(weights, dtype=float)
    return _LUT[diff][np.rint(np.clip(v, 0, 1) * 255).astype(int)]


def _font(size):
    for path in FONT_PATHS:
        try:
            return ImageFont.truetype(path, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)


def view_dict(weights, query_tokens, key_tokens, **meta):
    w = np.asarray(weights, dtype=float)
    if w.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(f"weights {w.shape} do not match {len(query_tokens)} queries x {len(key_tokens)} keys")
    return {"format": FORMAT, **meta, "rows": "queries", "columns": "keys",
            "query_tokens": [str(t) for t in query_tokens], "key_tokens": [str(t) for t in key_tokens],
            "weights": np.round(w, 6).tolist()}


def to_csv(view, path):
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        # position:token keeps repeated tokens apart, as the heatmap's numeric axes do
        out.writerow(["query \\ key"] + [f"{j}:{t}" for j, t in enumerate(view["key_tokens"])])
        for i, (tok, row) in enumerate(zip(view["query_tokens"], view["weights"], strict=True)):
            out.writerow([f"{i}:{tok}"] + row)


def cell_size(n_q, n_k):
    return max(3, min(CELL, MAX_SIDE // max(n_q, n_k)))


def to_svg(view, diff=False):
    w = np.asarray(view["weights"])
    n_q, n_k = w.shape
    cell = cell_size(n_q, n_k)
    width, height = MARGIN + n_k * cell + 20, MARGIN + n_q * cell + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(view.get("title", ""))}</text>']
    rgb = colours(w, diff)
    tips = n_q * n_k <= 4096  # hover titles, except on very large maps
    for i in range(n_q):
        for j in range(n_k):
            tip = (f'<title>{escape(view["query_tokens"][i])} → {escape(view["key_tokens"][j])}: '
                   f'{w[i, j]:.3f}</title>') if tips else ""
            r, g, b = rgb[i, j]
            parts.append(f'<rect x="{MARGIN + j * cell}" y="{MARGIN + i * cell}" width="{cell}" height="{cell}" '
                         f'fill="rgb({r},{g},{b})">{tip}</rect>')
    for i, tok in enumerate(view["query_tokens"]):
        parts.append(f'<text x="{MARGIN - 6}" y="{MARGIN + i * cell + cell / 2 + 4}" text-anchor="end">'
                     f'{escape(tok)}</text>')
    for j, tok in enumerate(view["key_tokens"]):
        x, y = MARGIN + j * cell + cell / 2, MARGIN - 6
        parts.append(f'<text x="{x}" y="{y}" transform="rotate(-45 {x} {y})">{escape(tok)}</text>')
    parts.append(f'<text x="{MARGIN}" y="{height - 12}">rows: queries, columns: keys</text></svg>')
    return "\n".join(parts)


def to_png(view, path, diff=False):
    w = np.asarray(view["weights"])
    n_q, n_k = w.shape
    cell = cell_size(n_q, n_k)
    img = Image.new("RGB", (MARGIN + n_k * cell + 20, MARGIN + n_q * cell + 40), "white")
    draw, font = ImageDraw.Draw(img), _font(12)
    draw.text((img.width / 2, 8), view.get("title", ""), fill="black", font=_font(14), anchor="mt")
    cells = Image.fromarray(colours(w, diff)).resize((n_k * cell, n_q * cell), Image.NEAREST)
    img.paste(cells, (MARGIN, MARGIN))
    for i, tok in enumerate(view["query_tokens"]):
        draw.text((MARGIN - 6, MARGIN + i * cell + cell / 2), tok, fill="black", font=font, anchor="rm")
    for j, tok in enumerate(view["key_tokens"]):  # keys: written vertically above their column
        label = Image.new("RGBA", (MARGIN - 10, cell), (255, 255, 255, 0))
        ImageDraw.Draw(label).text((0, cell / 2), tok, fill="black", font=font, anchor="lm")
        label = label.rotate(90, expand=True)
        img.paste(label, (MARGIN + j * cell, 4), label)
    draw.text((MARGIN, img.height - 20), "rows: queries, columns: keys", fill="black", font=font)
    img.save(path)


def clean_exports():
    """Drop exports older than KEEP_SECONDS (Gradio has copied them to its own cache by then)."""
    with _cleanup_lock:
        cutoff = time.time() - KEEP_SECONDS
        for folder in EXPORT_DIR.iterdir():
            if folder.stat().st_mtime < cutoff:
                for f in folder.iterdir():
                    f.unlink(missing_ok=True)
                folder.rmdir()


def export_files(weights, query_tokens, key_tokens, name, diff=False, **meta):
    """Write <name>.json/.csv/.svg/.png for one view into a fresh folder; return their paths."""
    clean_exports()
    view = view_dict(weights, query_tokens, key_tokens, **meta)
    folder = EXPORT_DIR / uuid.uuid4().hex
    folder.mkdir()
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "attention"
    paths = [folder / f"{stem}.{ext}" for ext in ("json", "csv", "svg", "png")]
    paths[0].write_text(json.dumps(view, ensure_ascii=False, indent=1), encoding="utf-8")
    to_csv(view, paths[1])
    paths[2].write_text(to_svg(view, diff), encoding="utf-8")
    to_png(view, paths[3], diff)
    return [str(p) for p in paths]
