"""Shared fixtures for the analysis tests: torch_npu sample files and profile-dir layouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NPU_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "npu"


@pytest.fixture
def npu_dir() -> Path:
    """Directory holding sample torch_npu outputs (step_trace_time.csv, kernel_details.csv,
    op_statistic.csv)."""
    return NPU_FIXTURES


def _ascend_output_dir(profile_dir: Path, host: str = "node0", pid: int = 4242) -> Path:
    """Create the directory torch_npu writes into and return it:
    ``<profile_dir>/<host>_<pid>_<ts>_ascend_pt/ASCEND_PROFILER_OUTPUT``."""
    out = profile_dir / f"{host}_{pid}_20251129110000123_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _place(profile_dir: Path, filename: str, text: str | None = None, **layout) -> Path:
    """Put ``filename`` (fixture copy, or ``text``) in a torch_npu-style layout under
    ``profile_dir`` and return its path."""
    target = _ascend_output_dir(profile_dir, **layout) / filename
    if text is None:
        shutil.copyfile(NPU_FIXTURES / filename, target)
    else:
        target.write_text(text, encoding="utf-8")
    return target


@pytest.fixture
def place_npu_file():
    """``place(profile_dir, filename, text=None, host=..., pid=...) -> Path``: put a fixture
    copy (or ``text``) where torch_npu would write it below ``profile_dir``."""
    return _place
