"""Multi30k task 1 (EN-DE image descriptions), raw text: read it, or download it once.

Files are `<split>.<lang>.gz` for split in train, val, test_2016_flickr. They are read from
`data_dir` when present there, else from a cache folder, else downloaded into that cache from the
public Multi30k repository. Offline and missing gives an error that says what to fetch and where.

Licence: non-commercial research and educational use. Cite Elliott et al., "Multi30K:
Multilingual English-German Image Descriptions", VL Workshop 2016 (doi:10.18653/v1/W16-3210).
"""

from __future__ import annotations

import gzip
import os
import urllib.request
from pathlib import Path

SPLITS = ("train", "val", "test_2016_flickr")
URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/{name}"
CACHE = Path(os.environ.get("ATTENTION_LAB_CACHE", Path.home() / ".cache" / "attention-lab")) / "multi30k"


def _file(split, lang, data_dir=None, cache_dir=CACHE):
    name = f"{split}.{lang}.gz"
    for folder in filter(None, [data_dir, cache_dir]):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    target = Path(cache_dir) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = target.with_suffix(".part")
        urllib.request.urlretrieve(URL.format(name=name), tmp)
        tmp.replace(target)
    except OSError as e:
        raise FileNotFoundError(
            f"Multi30k file {name} is not in {data_dir or '(no --data-dir given)'} and could not be "
            f"downloaded ({e}). Download {URL.format(name=name)} and put it in {data_dir or cache_dir}, "
            "or pass --data-dir pointing at a folder holding the six <split>.{en,de}.gz files."
        ) from None
    return target


def load_split(split, data_dir=None, cache_dir=CACHE):
    """(english_lines, german_lines) of a split, line-aligned, stripped of the newline."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    pair = []
    for lang in ("en", "de"):
        with gzip.open(_file(split, lang, data_dir, cache_dir), "rt", encoding="utf-8") as f:
            pair.append([line.rstrip("\n") for line in f])
    if len(pair[0]) != len(pair[1]):
        raise ValueError(f"{split}: {len(pair[0])} English lines but {len(pair[1])} German lines")
    return pair[0], pair[1]
