"""Where and with what an experiment ran, beyond what the runs record themselves: the host
fingerprint (CPU model, accelerator name and driver), afbench's version, the git commit of
the user's working directory and, on NPU, the CANN component build dates.

:func:`provenance` is written into ``experiment.json`` (key ``provenance``) when an experiment
starts, so the history reads the same facts from a live run and from an import. Standard
library only, file reads and one ``git`` call (no ``nvidia-smi`` / ``npu-smi``: they take
seconds); every probe that fails gives ``None``, never an error.

Sources: ``/proc/cpuinfo`` (``model name``; on aarch64 ``CPU implementer``/``CPU part``),
``/proc/driver/nvidia/version`` and ``/proc/driver/nvidia/gpus/*/information`` (the NVIDIA
kernel module), ``<driver>/version.info`` of the Ascend driver (``Version=``, default
``/usr/local/Ascend/driver``), ``git rev-parse HEAD``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

ASCEND_DRIVER = Path("/usr/local/Ascend/driver")
NVIDIA_PROC = Path("/proc/driver/nvidia")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_model(cpuinfo: str | None = None) -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (x86: ``model name``; aarch64: ``CPU
    implementer`` and ``CPU part`` as ``arm 0x41/0xd0c``), else ``platform.processor()``."""
    text = _read(Path("/proc/cpuinfo")) if cpuinfo is None else cpuinfo
    fields: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    if fields.get("cpu implementer") and fields.get("cpu part"):
        return f"arm {fields['cpu implementer']}/{fields['cpu part']}"
    return platform.processor() or None


def nvidia_info(root: Path = NVIDIA_PROC) -> tuple[str | None, str | None]:
    """(GPU model names joined with ``+`` when they differ, driver version) from the NVIDIA
    kernel module's ``/proc`` files; (None, None) without the module."""
    version = _read(root / "version")
    driver = None
    if version:
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", version)
        driver = m.group(1) if m else None
    names = []
    gpus = root / "gpus"
    if gpus.is_dir():
        for info in sorted(gpus.glob("*/information")):
            m = re.search(r"^Model:\s*(.+)$", _read(info) or "", re.M)
            if m and m.group(1).strip() not in names:
                names.append(m.group(1).strip())
    return ("+".join(names) or None), driver


def ascend_driver(root: Path = ASCEND_DRIVER) -> str | None:
    """The Ascend driver's ``Version=`` from ``<root>/version.info``, None without it."""
    m = re.search(r"^\s*Version\s*=\s*(\S+)", _read(root / "version.info") or "", re.M | re.I)
    return m.group(1) if m else None


def host_fingerprint() -> dict[str, Any]:
    """``hostname``, ``cpu_model``, ``cpu_count``, ``accelerator`` (GPU model names; the
    NPU's name comes from the runs' ``result.json`` instead), ``driver`` (``nvidia 550.54``
    or ``ascend 24.1.rc2``) and ``host_id``: the first 16 hex digits of the SHA-256 of
    hostname, CPU model, accelerator and driver (a new driver is a new host id: calibrations
    and the history gate keep them apart)."""
    gpu, nv_driver = nvidia_info()
    npu_driver = ascend_driver()
    driver = (f"nvidia {nv_driver}" if nv_driver else None) or (
        f"ascend {npu_driver}" if npu_driver else None
    )
    host = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "accelerator": gpu,
        "driver": driver,
    }
    host["host_id"] = host_id(host)
    return host


def host_id(host: dict[str, Any]) -> str:
    """The host id of a fingerprint (see :func:`host_fingerprint`)."""
    key = "|".join(
        str(host.get(k) or "") for k in ("hostname", "cpu_model", "accelerator", "driver")
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def git_commit(cwd: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of ``cwd`` (default: the current directory) when it is inside a
    git work tree, with ``+dirty`` when tracked files differ from it; None otherwise (no git,
    not a repository, or git took more than 2 s)."""
    cwd = Path.cwd() if cwd is None else cwd
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=2
        )
        if head.returncode != 0:
            return None
        dirty = (
            subprocess.run(
                ["git", "diff", "--quiet", "HEAD", "--"], cwd=cwd, capture_output=True, timeout=2
            ).returncode
            == 1
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def afbench_version() -> str | None:
    try:
        return importlib.metadata.version("afbench")
    except importlib.metadata.PackageNotFoundError:
        return None


def cann_dates(backend: str | None, cann_root: str | None) -> dict[str, str | None] | None:
    """CANN component build dates (Toolkit, AutoFuse, Runtime, HCCL, OPP -> ``20YYMMDD``) on
    npu, from ``backend.cann_root`` or ``$ASCEND_TOOLKIT_HOME`` / ``$ASCEND_HOME_PATH``
    (:func:`afbench.preflight.cann_build_dates`); None on other backends or without a root."""
    if backend != "npu":
        return None
    from afbench.preflight import cann_build_dates, find_cann_root

    root, _ = find_cann_root(cann_root)
    return cann_build_dates(root) if root else None


def provenance(backend: str | None = None, cann_root: str | None = None) -> dict[str, Any]:
    """What ``experiment.json`` records under ``provenance``: ``afbench``, ``git_commit``,
    ``cwd``, ``host`` (:func:`host_fingerprint`) and ``cann`` (:func:`cann_dates`)."""
    return {
        "afbench": afbench_version(),
        "git_commit": git_commit(),
        "cwd": str(Path.cwd()),
        "host": host_fingerprint(),
        "cann": cann_dates(backend, cann_root),
    }
