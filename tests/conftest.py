"""Shared fixtures: where the real benchmark files live, and an isolated cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The real benchmark files (../shared/data beside the checkout; env LZE_BENCH_SHARED_DATA overrides)."""
    return Path(os.environ.get("LZE_BENCH_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real benchmark files not found at {path} (set LZE_BENCH_SHARED_DATA)")
    return path
