"""Atomic writes: a failure while writing (disk full) leaves the previous file intact."""

from __future__ import annotations

import errno
import os

import pytest

from afbench import io


def test_disk_full_during_write_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    target.write_text("previous report\n")
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="disk full: no space left for .*report.md"):
        io.write_text_atomic(target, "new report\n" * 1000)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == "previous report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "summary.json"
    io.write_json_atomic(target, {"a": 1})
    io.write_json_atomic(target, {"b": 2})
    assert io.read_json(target) == {"b": 2}


def _strict(text: str):
    import json

    def reject(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=reject)


def test_non_finite_numbers_are_written_as_null_so_any_json_parser_reads_the_file(tmp_path):
    path = tmp_path / "summary.json"
    io.write_json_atomic(
        path,
        {
            "mean_step_s": float("nan"),
            "rows": [1.5, float("inf")],
            "nested": {"low": float("-inf"), "ok": 0.25},
        },
    )
    assert _strict(path.read_text()) == {
        "mean_step_s": None,
        "rows": [1.5, None],
        "nested": {"low": None, "ok": 0.25},
    }
