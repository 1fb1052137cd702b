"""Which backend a run uses: ``backend=auto`` resolved to npu > cuda > cpu, without torch.

The one resolver of afbench: the planner records its answer in every RunSpec
(``spec.backend``), and preflight, the launcher and the worker read that. It imports neither
torch nor torch_npu (importing torch costs about 1.5 s, and the orchestrator must start fast),
so it looks at what is installed and what the machine exposes:

- **npu** when ``torch_npu`` is installed (``importlib.util.find_spec``), at least one
  ``/dev/davinci<N>`` device node exists (the Ascend driver's), and
  ``ASCEND_RT_VISIBLE_DEVICES`` is not set to the empty string;
- else **cuda** when ``torch`` is installed and is not a CPU-only wheel (its distribution
  version has no ``+cpu`` tag), the NVIDIA driver is loaded (``/proc/driver/nvidia/version``
  exists, or ``nvidia-smi -L`` lists a GPU), and ``CUDA_VISIBLE_DEVICES`` is not set to the
  empty string or ``-1``;
- else **cpu**.

These are signs, not proof: a broken CANN or CUDA install still resolves to its device.
:func:`probe_backend` (which imports torch) is the proof; preflight shows its answer as the
``backend`` check, and the worker fails the run with its reason before anything is timed.
"""

from __future__ import annotations

import functools
import glob
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the annotation only: importing base would import torch
    from afbench.backends.base import Backend

Resolved = Literal["cpu", "cuda", "npu"]
BACKENDS: tuple[str, ...] = ("cpu", "cuda", "npu")
#: The variable that restricts a process to some devices, per backend (cpu: none).
VISIBLE_DEVICES_ENV: dict[str, str] = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
}
NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"
DAVINCI_GLOB = "/dev/davinci[0-9]*"
NVIDIA_SMI_TIMEOUT_S = 10.0


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def _cpu_only_torch() -> bool:
    try:
        return "+cpu" in importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False


def _nvidia_driver() -> bool:
    if os.path.exists(NVIDIA_DRIVER_FILE):
        return True
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        out = subprocess.run(
            [exe, "-L"],
            capture_output=True,
            text=True,
            check=False,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def _ascend_devices() -> bool:
    return bool(glob.glob(DAVINCI_GLOB))


def detect_backend(environ: Mapping[str, str] | None = None) -> Resolved:
    """``npu``, ``cuda`` or ``cpu`` by the rules of this module's docstring; no torch import.

    ``environ`` (default ``os.environ``) is read for the visibility variables only.
    """
    environ = os.environ if environ is None else environ
    if (
        environ.get(VISIBLE_DEVICES_ENV["npu"]) != ""
        and _installed("torch_npu")
        and _ascend_devices()
    ):
        return "npu"
    if (
        environ.get(VISIBLE_DEVICES_ENV["cuda"]) not in ("", "-1")
        and _installed("torch")
        and not _cpu_only_torch()
        and _nvidia_driver()
    ):
        return "cuda"
    return "cpu"


@functools.cache
def _detected() -> Resolved:
    return detect_backend()


def resolve_backend(name: str) -> Resolved:
    """``auto`` -> :func:`detect_backend` (probed once per process); ``cpu``, ``cuda``,
    ``npu`` unchanged.

    Raises:
        ValueError: any other name (the config schema admits only these four).
    """
    if name == "auto":
        return _detected()
    if name not in BACKENDS:
        raise ValueError(f"backend {name!r} is not one of auto, {', '.join(BACKENDS)}")
    return name  # type: ignore[return-value]


def probe_backend(backend: str) -> tuple[int | None, str]:
    """Device count of a resolved backend: ``(count, "")``, or ``(None, why not)`` when torch
    cannot use it. Imports torch (and torch_npu on npu): call it where that is paid anyway
    (preflight, the worker).

    cpu: ``(None, "")`` (no device ids). cuda: ``torch.cuda.is_available()`` and
    ``torch.cuda.device_count()``. npu: ``import torch_npu`` and ``torch.npu.device_count()``.
    """
    if backend == "cpu":
        return None, ""
    import torch  # the proof needs torch; resolving (above) must not pay for it

    if backend == "cuda":
        if not torch.cuda.is_available():
            return None, f"torch {torch.__version__} sees no CUDA device"
        return torch.cuda.device_count(), ""
    if backend == "npu":
        if importlib.util.find_spec("torch_npu") is None:
            return None, "torch_npu is not installed"
        try:
            import torch_npu  # noqa: F401  (registers torch.npu)

            count = torch.npu.device_count()
        except Exception as exc:  # a broken CANN install raises anything from import
            return None, f"torch_npu fails: {type(exc).__name__}: {exc}"
        if count < 1:
            return None, "torch_npu sees no NPU"
        return count, ""
    return None, f"unknown backend {backend!r}"


def get_backend(name: str, num_threads: int | None = None) -> "Backend":
    """Instantiate a backend by name (``auto`` resolved by :func:`resolve_backend`, as the
    planner does). Imports torch (and torch_npu for npu): worker only.

    Raises:
        RunSkipped: npu without an importable torch_npu.
        ValueError: an unknown name.
    """
    name = resolve_backend(name)
    if name == "cpu":
        from afbench.backends.cpu import CpuBackend  # torch: worker only

        return CpuBackend(num_threads)
    if name == "cuda":
        from afbench.backends.cuda import CudaBackend  # torch: worker only

        return CudaBackend()
    if name == "npu":
        from afbench.backends.npu import NpuBackend  # torch, torch_npu: worker only

        return NpuBackend()
    raise ValueError(f"unknown backend {name!r}")
