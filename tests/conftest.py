import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"

# Tests are many small computations: one thread is faster than fighting over two.
torch.set_num_threads(1)
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data when this checkout has it (CI and the dev machine do); else skip."""
    if not SHARED.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED
