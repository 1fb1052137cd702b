"""Ascend NPU backend (torch_npu, torchair), and the CANN environment of NPU workers.

Written against the real APIs of docs/reference.md §3-§4; it cannot run on this project's CPU CI (no
NPU there), so tests stop at the device calls (tests/test_backends_npu_cuda.py injects a fake
torch_npu)."""

from __future__ import annotations

import importlib
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from afbench.backends.base import Backend, PeakMemory, device_peak_memory
from afbench.config.models import CompileConfig, NpuProfilerConfig
from afbench.errors import PreflightError, RunSkipped

#: Removed from NPU workers' environment (docs/reference.md §1): a preloaded allocator or another
#: Python's home / conda prefix makes torch_npu load the wrong libraries.
DROPPED_ENV = ("LD_PRELOAD", "PYTHONHOME", "CONDA_PREFIX")
#: Added to NPU workers' environment (docs/reference.md §1).
NPU_ENV = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
#: Variables that are lists of folders: set_env.sh prepends to them, so the worker gets
#: set_env.sh's entries first and afbench's own after them.
PATH_LISTS = (
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "ASCEND_OPP_PATH",
    "ASCEND_AICPU_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "CMAKE_PREFIX_PATH",
    "PKG_CONFIG_PATH",
)
#: What bash itself adds to any environment: not set_env.sh's doing.
_SHELL_VARS = ("PWD", "OLDPWD", "SHLVL", "_")
CANN_ENV_TIMEOUT_S = 60.0


def cann_env(
    cann_root: str | Path,
    *,
    path: str | None = None,
    home: str | None = None,
    timeout_s: float = CANN_ENV_TIMEOUT_S,
) -> dict[str, str]:
    """The environment ``<cann_root>/set_env.sh`` sets up, read from a clean shell.

    Runs ``bash -c '. "$1" >&2; env -0' bash <cann_root>/set_env.sh`` (an argv list, no shell
    string is built) in an environment holding only PATH and HOME (``env -i`` style, so
    nothing of afbench's environment leaks into the result), then parses ``env -0``'s
    NUL-separated ``NAME=value`` records. set_env.sh's own output goes to stderr and is
    ignored; its exit status is ignored too, since many set_env.sh scripts end with a
    ``[ -d ... ] && ...`` test that returns 1.

    Returns:
        Every variable of the sourced shell except bash's own (PWD, SHLVL, ...) and
        :data:`DROPPED_ENV`, plus :data:`NPU_ENV`.

    Args:
        cann_root: the CANN toolkit folder (``backend.cann_root``), holding set_env.sh.
        path, home: PATH and HOME of the clean shell (default: afbench's own).

    Raises:
        PreflightError: set_env.sh is missing, or bash fails / times out.
    """
    script = Path(cann_root) / "set_env.sh"
    if not script.is_file():
        raise PreflightError(
            f"[FAIL] CANN root: current {script} missing; required set_env.sh "
            f"under backend.cann_root; action set backend.cann_root to the "
            f"CANN toolkit folder"
        )
    clean = {
        "PATH": path if path is not None else os.environ.get("PATH", os.defpath),
        "HOME": home if home is not None else os.environ.get("HOME", "/"),
    }
    argv = ["bash", "-c", '. "$1" >&2; env -0', "bash", str(script)]
    try:
        proc = subprocess.run(
            argv,
            env=clean,
            capture_output=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(
            f"[FAIL] CANN set_env.sh: current cannot source {script}: {exc}; "
            "required bash sources it; action check the CANN install"
        ) from exc
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise PreflightError(
            f"[FAIL] CANN set_env.sh: current sourcing {script} exited "
            f"{proc.returncode}: {tail[0]}; required exit 0; action check the "
            "CANN install"
        )
    env: dict[str, str] = {}
    for record in proc.stdout.split(b"\0"):
        name, sep, value = record.decode(errors="surrogateescape").partition("=")
        if sep and name and name not in _SHELL_VARS and name not in DROPPED_ENV:
            env[name] = value
    env.update(NPU_ENV)
    return env


def _join_paths(first: str, then: str | None) -> str:
    seen: list[str] = []
    for entry in first.split(os.pathsep) + (then or "").split(os.pathsep):
        if entry and entry not in seen:
            seen.append(entry)
    return os.pathsep.join(seen)


def npu_worker_env(env: Mapping[str, str], cann_root: str | Path | None) -> dict[str, str]:
    """``env`` made into an NPU worker's environment: :data:`DROPPED_ENV` removed,
    :data:`NPU_ENV` set, and, when ``cann_root`` is given, :func:`cann_env`'s variables on top
    (folder lists in :data:`PATH_LISTS` get set_env.sh's entries first, then ``env``'s, without
    duplicates; everything else takes set_env.sh's value). With ``cann_root`` None the CANN
    variables already in ``env`` (a shell that sourced set_env.sh) are kept."""
    out = {k: v for k, v in env.items() if k not in DROPPED_ENV}
    out.update(NPU_ENV)
    if cann_root is None:
        return out
    for name, value in cann_env(cann_root, path=env.get("PATH"), home=env.get("HOME")).items():
        out[name] = _join_paths(value, out.get(name)) if name in PATH_LISTS else value
    return out


def _ships_ascendc(torch_npu: Any) -> bool:
    """Whether this torch_npu holds the ascendc (AutoFuse) inductor backend, read from its
    folder: importing ``torch_npu._inductor`` would load an inductor backend as a side effect."""
    init = getattr(torch_npu, "__file__", None)
    return init is not None and (Path(init).parent / "_inductor" / "ascendc").is_dir()


def _local_rank() -> int:
    # under torchrun each rank takes its own device among the visible ones
    return int(os.environ.get("LOCAL_RANK", "0"))


class NpuBackend(Backend):
    name = "npu"

    def __init__(self) -> None:
        try:
            import torch_npu  # noqa: F401  (registers torch.npu)
        except ImportError as exc:
            raise RunSkipped(
                f"backend npu needs torch_npu (pip install afbench[npu]): {exc}"
            ) from exc
        self.torch_npu = importlib.import_module("torch_npu")

    def device(self) -> torch.device:
        # ASCEND_RT_VISIBLE_DEVICES (set by the launcher, afbench.launch.devices) makes the
        # run's devices npu:0..world_size-1; rank r of a torchrun job takes npu:r.
        index = _local_rank()
        torch.npu.set_device(index)
        return torch.device("npu", index)

    def synchronize(self) -> None:
        torch.npu.synchronize()

    def reset_peak_memory(self) -> None:
        torch.npu.reset_peak_memory_stats(_local_rank())

    def peak_memory(self) -> PeakMemory:
        # Written against torch_npu's API (torch.npu mirrors torch.cuda's memory functions);
        # it has not run on an NPU here, only against the fakes of tests/test_backends_npu_cuda.py.
        return device_peak_memory(torch.npu, "npu", _local_rank())

    def device_name(self) -> str:
        return torch.npu.get_device_name(_local_rank())

    def compile(self, module: torch.nn.Module, cfg: CompileConfig) -> tuple[Any, str]:
        """AutoFuse: inductor with ``npu_backend="ascendc"``. torch_npu 2.14 ships the ascendc
        backend itself (``torch_npu/_inductor/ascendc``, bench/results/npu_api_conformance.txt);
        older releases need torchair's separate ``inductor_npu_ext`` (built from the torchair
        repository's ``experimental/_inductor_npu_ext``). Raises RunSkipped when neither is there."""
        if not _ships_ascendc(self.torch_npu):
            try:
                importlib.import_module("inductor_npu_ext")
            except ImportError as exc:
                raise RunSkipped(
                    f"autofuse on npu needs torch_npu >= 2.14 (ships the ascendc inductor backend) "
                    f"or, with torch_npu {getattr(self.torch_npu, '__version__', '?')}, the "
                    f"inductor_npu_ext package from torchair: {exc}"
                ) from exc
        options = {"npu_backend": "ascendc", **cfg.options}
        compiled = torch.compile(
            module,
            backend="inductor",
            mode=cfg.mode,
            fullgraph=cfg.fullgraph,
            dynamic=cfg.dynamic,
            options=options,
        )
        return (
            compiled,
            "torch.compile(backend='inductor', options={'npu_backend': 'ascendc'}) (AutoFuse)",
        )

    def graph_mode(self, fn: Callable, options: dict[str, Any]) -> tuple[Callable, str]:
        compiled = torch.compile(
            fn, backend="npugraph_ex", fullgraph=True, dynamic=False, options=dict(options) or None
        )
        return compiled, f"torch.compile(backend='npugraph_ex', fullgraph=True, options={options})"

    def add_rms_norm(self) -> tuple[Callable | None, str]:
        return self.torch_npu.npu_add_rms_norm, "torch_npu.npu_add_rms_norm"

    def rms_norm(self) -> tuple[Callable | None, str]:
        return self.torch_npu.npu_rms_norm, "torch_npu.npu_rms_norm"

    def profiler_activities(self) -> list[Any]:
        prof = self.torch_npu.profiler
        return [prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU]

    def npu_profiler_settings(self, cfg: NpuProfilerConfig) -> Any:
        prof = self.torch_npu.profiler
        return prof._ExperimentalConfig(
            profiler_level=getattr(prof.ProfilerLevel, cfg.profiler_level),
            aic_metrics=getattr(prof.AiCMetrics, cfg.aic_metrics),
            export_type=getattr(prof.ExportType, cfg.export_type),
        )

    def versions(self) -> dict[str, str]:
        return {
            "torch": torch.__version__,
            "torch_npu": getattr(self.torch_npu, "__version__", "?"),
        }

    def describe(self) -> str:
        return f"npu ({self.device_name()})"
