import os
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_default_dtype(torch.float64)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir():
    """The directory of the real UCI files (LDHMM_DATA or ../shared/data); skip if absent."""
    path = Path(os.environ.get("LDHMM_DATA", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"real data not found at {path}")
    return path


@pytest.fixture(scope="session")
def true_model():
    from ldhmm.models import LDHMM

    return LDHMM.from_hyperparameters(
        [1.0, 2.0, 0.5],
        [[6.0, 1.0, 1.0], [1.0, 6.0, 1.0], [1.0, 1.0, 6.0]],
        [[4.0, 1.0, 0.5, 0.5], [0.5, 4.0, 1.0, 0.5], [0.5, 0.5, 1.0, 4.0]],
    )


@pytest.fixture(scope="session")
def small_db(true_model):
    rng = np.random.default_rng(0)
    return true_model.sample(120, lengths=rng.integers(1, 25, 120), seed=1)


@pytest.fixture(scope="session")
def data_dir_or_none():
    """The directory of the real UCI files, or None when absent (tests then use synthetic data only)."""
    path = Path(os.environ.get("LDHMM_DATA", REPO.parent / "shared" / "data"))
    return path if path.is_dir() else None
