import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import corridor

corridor.register()

# The Ctrl-C tests send SIGINT to this process and to children it starts. A suite started in the background
# (`nohup make test &`) inherits SIGINT *ignored*, and children inherit that too, so those tests would fail for
# reasons of how the suite was launched; a Python handler is not inherited across exec, so children get the default.
signal.signal(signal.SIGINT, signal.default_int_handler)


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
