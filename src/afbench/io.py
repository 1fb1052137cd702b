"""Atomic file writes: a temp file in the same folder, fsync, rename. A crash or a full disk
leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def json_safe(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, +-inf) replaced by ``None``: JSON (RFC 8259)
    has no NaN, and a bare ``NaN`` in summary.json breaks every strict parser (JavaScript's
    ``JSON.parse``, ``jq``, Python's ``json.loads(..., parse_constant=...)``)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON, atomically; non-finite floats are written as ``null``
    (:func:`json_safe`), so the file is valid JSON for any reader."""
    text = json.dumps(json_safe(data), indent=2, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def inside(path: Path, root: Path) -> Path:
    """``path`` (a file or folder about to be written in the directory ``root``) when it still
    lies in ``root`` with every symlink on its way followed: a received directory whose
    ``results`` links to another folder must not have afbench write there. (The writes above
    are safe for a link at the file itself: the rename replaces the link, not its target.)

    Raises OutputError naming ``path`` and where it leads when that is outside ``root``."""
    from afbench.errors import OutputError

    real, top = Path(path).resolve(), Path(root).resolve()
    if real != top and top not in real.parents:
        raise OutputError(f"{path}: a symlink leads it to {real}, outside {top}; afbench "
                          "writes nothing through links out of the directory it writes: "
                          "remove the link")
    return Path(path)
