"""The CUDA-only tests (``pytest -m gpu``): each skips where no CUDA device is."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
