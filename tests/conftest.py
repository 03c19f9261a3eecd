import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import corridor

corridor.register()


def pytest_collection_modifyitems(config, items):
    """GPU tests skip cleanly on machines without CUDA (CI has none)."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
