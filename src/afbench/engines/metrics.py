"""metrics.jsonl writer (torch-free, shared by every engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO


class MetricsWriter:
    """Appends one JSON record ``{"kind": ..., ...}`` per line to ``metrics.jsonl`` and flushes,
    so a crash keeps every record written before it."""

    def __init__(self, path: Path) -> None:
        self.fh: TextIO = open(path, "a", encoding="utf-8")

    def write(self, kind: str, **record: Any) -> None:
        self.fh.write(json.dumps({"kind": kind, **record}) + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()
