"""Preflight of an Ascend NPU host: the CANN install (``backend.cann_root``, else
``ASCEND_TOOLKIT_HOME`` / ``ASCEND_HOME_PATH``), its components' build dates against
``preflight.min_cann_date`` (``version.info`` files), and ``npu-smi info``. Part of
:mod:`afbench.preflight`; each check returns :class:`afbench.preflight.Check` lines."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

from afbench.config.models import AfbenchConfig
from afbench.preflight.check import Check

Runner = Callable[..., subprocess.CompletedProcess]

CANN_COMPONENTS: dict[str, str] = {
    "Toolkit": "share/info/asc-devkit/version.info",
    "AutoFuse": "share/info/graph_autofusion/version.info",
    "Runtime": "share/info/runtime/version.info",
    "HCCL": "share/info/hccl/version.info",
    "OPP": "opp/version.info",
}
NPU_SMI_COMMANDS: tuple[tuple[str, ...], ...] = (("npu-smi", "info"), ("npu-smi", "info", "-m"))


# CANN: the minimum build date of each component and where its version.info lives, relative
# to the CANN root (docs/reference.md §1).
DEFAULT_MIN_CANN_DATE = "20260715"


CANN_ENV_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")


EXAMPLE_CANN_ROOT = "/usr/local/Ascend/ascend-toolkit/latest"


NPU_SMI_TIMEOUT_S = 30.0


_BUILD_KEYS = ("timestamp", "build")


_DATE_AT_START = re.compile(r"^(20\d{6})")


def find_cann_root(
    configured: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """The CANN root and where it came from: ``backend.cann_root``, else ``$ASCEND_TOOLKIT_HOME``,
    else ``$ASCEND_HOME_PATH``; ``(None, "")`` when none is set."""
    if configured:
        return configured, "backend.cann_root"
    environ = os.environ if environ is None else environ
    for var in CANN_ENV_VARS:
        if environ.get(var):
            return environ[var], f"${var}"
    return None, ""


def check_cann_layout(root: str | Path | None, source: str = "backend.cann_root") -> Check:
    """The CANN root holds ``set_env.sh``, ``opp/`` and ``lib64/``."""
    item = "CANN root"
    if root is None:
        return Check(
            item,
            False,
            "not set (backend.cann_root, $ASCEND_TOOLKIT_HOME, $ASCEND_HOME_PATH)",
            "a CANN install",
            f"set backend.cann_root={EXAMPLE_CANN_ROOT}",
        )
    root = Path(root)
    missing = [
        name
        for name, ok in (
            ("set_env.sh", (root / "set_env.sh").is_file()),
            ("opp/", (root / "opp").is_dir()),
            ("lib64/", (root / "lib64").is_dir()),
        )
        if not ok
    ]
    if missing:
        return Check(
            item,
            False,
            f"{root} (from {source}) lacks {', '.join(missing)}",
            "set_env.sh, opp/ and lib64/ under the CANN root",
            f"set backend.cann_root to the toolkit folder, e.g. {EXAMPLE_CANN_ROOT}",
        )
    return Check(item, True, f"{root} (from {source})")


def read_build_date(version_info: Path) -> str | None:
    """Build date ``20YYMMDD`` of a CANN ``version.info``: the start of the first valid
    ``timestamp=`` or ``build=`` value (keys case-insensitive). None if the file has none.

    Raises OSError when the file cannot be read.
    """
    for line in Path(version_info).read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.strip().lower() not in _BUILD_KEYS:
            continue
        m = _DATE_AT_START.match(value.strip().strip("\"'"))
        if m is None:
            continue
        try:
            datetime.strptime(m.group(1), "%Y%m%d")
        except ValueError:
            continue
        return m.group(1)
    return None


def cann_build_dates(root: str | Path) -> dict[str, str | None]:
    """Build date (``20YYMMDD``) of each CANN component, None where the file is missing,
    unreadable or has no date; keys Toolkit, AutoFuse, Runtime, HCCL, OPP (for the report)."""
    dates: dict[str, str | None] = {}
    for name, rel in CANN_COMPONENTS.items():
        try:
            dates[name] = read_build_date(Path(root) / rel)
        except OSError:
            dates[name] = None
    return dates


def check_cann_dates(root: str | Path, min_date: str = DEFAULT_MIN_CANN_DATE) -> list[Check]:
    """One check per CANN component: its version.info exists and its build date is >= ``min_date``.

    Raises ValueError if ``min_date`` is not a ``20YYMMDD`` date.
    """
    if not _DATE_AT_START.fullmatch(min_date):
        raise ValueError(f"min_date {min_date!r} is not a 20YYMMDD date")
    datetime.strptime(min_date, "%Y%m%d")  # ValueError for e.g. 20261399
    root = Path(root)
    required = f"build date >= {min_date}"
    upgrade = (
        f"install a CANN release built on or after {min_date} and set "
        f"backend.cann_root to it (e.g. {EXAMPLE_CANN_ROOT})"
    )
    checks = []
    for name, rel in CANN_COMPONENTS.items():
        item = f"CANN {name}"
        path = root / rel
        if not path.is_file():
            checks.append(
                Check(
                    item,
                    False,
                    f"{path} missing",
                    required,
                    f"install the CANN {name} component, or {upgrade}",
                )
            )
            continue
        try:
            date = read_build_date(path)
        except OSError as exc:
            checks.append(
                Check(
                    item,
                    False,
                    f"{path} unreadable: {exc.strerror or exc}",
                    required,
                    f"make {path} readable by the current user",
                )
            )
            continue
        if date is None:
            checks.append(
                Check(item, False, f"no timestamp=/build= date in {path}", required, upgrade)
            )
        elif date < min_date:
            checks.append(Check(item, False, f"{date} ({rel})", required, upgrade))
        else:
            checks.append(Check(item, True, f"{date} ({rel})"))
    return checks


def check_npu_smi(
    timeout_s: float = NPU_SMI_TIMEOUT_S, runner: Runner = subprocess.run
) -> list[Check]:
    """``npu-smi info`` and ``npu-smi info -m`` exit 0 within ``timeout_s`` seconds each.

    A missing ``npu-smi`` gives one FAIL line. ``runner`` is :func:`subprocess.run` (tests may
    pass a fake); commands are argv lists, never shell strings.
    """
    exe = shutil.which("npu-smi")
    if exe is None:
        return [
            Check(
                "npu-smi",
                False,
                "not found on PATH",
                "npu-smi on PATH (Ascend driver)",
                "install the Ascend driver and add its tools folder to PATH "
                "(e.g. /usr/local/Ascend/driver/tools)",
            )
        ]
    checks = []
    for argv in NPU_SMI_COMMANDS:
        item = " ".join(argv)
        try:
            proc = runner(
                [exe, *argv[1:]],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            checks.append(
                Check(
                    item,
                    False,
                    f"no answer within {timeout_s:g} s",
                    "exit 0",
                    "check the NPU driver (dmesg, npu-smi info by hand); a hung "
                    "driver needs the host's administrator",
                )
            )
            continue
        except OSError as exc:
            checks.append(
                Check(
                    item,
                    False,
                    f"cannot run {exe}: {exc.strerror or exc}",
                    "exit 0",
                    f"make {exe} executable by the current user",
                )
            )
            continue
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()
            why = f": {tail[-1].strip()}" if tail else ""
            checks.append(
                Check(
                    item,
                    False,
                    f"exit status {proc.returncode}{why}",
                    "exit 0",
                    "check the NPU driver and that the current user may use the "
                    "devices (group HwHiAiUser)",
                )
            )
        else:
            checks.append(Check(item, True, "exit 0"))
    return checks


def check_cann(
    conf: AfbenchConfig,
    *,
    min_date: str = DEFAULT_MIN_CANN_DATE,
    environ: Mapping[str, str] | None = None,
) -> list[Check]:
    """All NPU host checks: CANN root layout, component build dates, npu-smi."""
    root, source = find_cann_root(conf.backend.cann_root, environ)
    checks = [check_cann_layout(root, source)]
    if root is not None and Path(root).is_dir():
        checks += check_cann_dates(root, min_date)
    checks += check_npu_smi()
    return checks
