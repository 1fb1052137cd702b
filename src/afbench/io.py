"""Atomic file writes: a temp file in the same folder, fsync, rename. A crash or a full disk
leaves either the old file or the new one, never half of one (and no temp file).

A full disk: an experiment keeps a reserve file in its output directory
(:func:`reserve_space`); the first write that finds no space frees every reserve and tries
once more, so the run that was ending still gets its status and the experiment its report;
a write that still finds no space raises :class:`afbench.errors.DiskFull` naming the disk
and its free space."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from afbench.errors import DiskFull

#: what a reserve file holds (bytes): the failing run's status, the later runs' SKIPPED
#: folders and the report of an experiment (summary.json, report.md/.html, results/)
RESERVE_BYTES = 16 << 20
RESERVE = ".afbench-reserve"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_reserves: dict[Path, str | None] = {}  # reserve -> the disk-full line that freed it


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mount(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def disk_full_line(path: Path) -> str:
    """One line naming the file system of ``path`` and its free space, e.g. ``disk full:
    no space left for /out/x/status.json on /mnt/out (0.0 MiB free of 64.0 MiB); free space
    there, ...``."""
    path = Path(path)
    folder = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    try:
        usage = shutil.disk_usage(folder)
        space = f"{usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.1f} MiB"
    except OSError:
        space = "free space unknown"
    return (
        f"disk full: no space left for {path} on {_mount(folder)} ({space}); free space "
        "there, or give hydra.run.dir= a folder on a larger disk"
    )


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that found no space (ENOSPC, EDQUOT, or DiskFull)."""
    return isinstance(exc, DiskFull) or (isinstance(exc, OSError) and exc.errno in _NO_SPACE)


def reserve_space(folder: Path, nbytes: int = RESERVE_BYTES) -> Path:
    """Create ``<folder>/.afbench-reserve`` holding ``nbytes`` of disk, freed by the first write
    that finds no space (:func:`write_bytes_atomic`); :func:`reserve_used` tells when that
    happened, :func:`release_reserve` removes it at the end.

    Raises:
        DiskFull: the disk cannot hold the reserve now.
    """
    path = Path(folder) / RESERVE
    try:
        with open(path, "wb") as fh:
            try:
                os.posix_fallocate(fh.fileno(), 0, nbytes)
            except OSError as exc:  # a file system without fallocate: write the bytes
                if exc.errno in _NO_SPACE:
                    raise
                for _ in range(0, nbytes, 1 << 20):
                    fh.write(bytes(1 << 20))
    except OSError as exc:
        path.unlink(missing_ok=True)
        if exc.errno in _NO_SPACE:
            raise DiskFull(disk_full_line(path)) from None
        raise
    _reserves[path] = None
    return path


def reserve_used(path: Path | None) -> str | None:
    """The disk-full line (:func:`disk_full_line`, the free space when the disk was found
    full) that freed the reserve ``path`` of :func:`reserve_space`; None while it is kept."""
    return _reserves.get(path) if path is not None else None


def release_reserve(path: Path | None) -> None:
    """Remove the reserve ``path`` (the experiment has ended)."""
    if path is not None and path in _reserves:
        del _reserves[path]
        path.unlink(missing_ok=True)


def _free_reserves(line: str) -> bool:
    freed = False
    for path, used in _reserves.items():
        if used is None:
            path.unlink(missing_ok=True)
            _reserves[path] = line
            freed = True
    return freed


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically. No space: the reserves are freed and the write
    tried once more (:func:`reserve_space`).

    Raises:
        DiskFull: still no space (the message names the disk and its free space).
        OSError: any other write error; no temp file is left either way.
    """
    try:
        _write_once(Path(path), data)
    except OSError as exc:
        if exc.errno not in _NO_SPACE:
            raise
        line = disk_full_line(Path(path))
        if _free_reserves(line):
            try:
                return _write_once(Path(path), data)
            except OSError as again:
                if again.errno not in _NO_SPACE:
                    raise
        raise DiskFull(line) from None


def _write_once(path: Path, data: bytes) -> None:
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
        raise OutputError(
            f"{path}: a symlink leads it to {real}, outside {top}; afbench "
            "writes nothing through links out of the directory it writes: "
            "remove the link"
        )
    return Path(path)
