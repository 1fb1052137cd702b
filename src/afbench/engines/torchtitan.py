"""The torchtitan engine: afbench's run config as a torchtitan / torchtitan-npu command line,
and torchtitan's console log, structured logs and profiler traces read back as afbench records.

Everything up to the process boundary is pure and testable on a CPU-only machine (torchtitan
itself does not run there, REFERENCE §7): :func:`build_command` turns a RunSpec into an argv
list and environment, the parsers read torchtitan's outputs, and :func:`run_torchtitan` starts
the process, streams its output, writes ``metrics.jsonl`` and prints afbench's reference step
line so the strict verdict parser (:mod:`afbench.analysis.steplog`) applies unchanged.

Formats, as written by torchtitan 0.3.0 (PyPI wheel) and torchtitan-npu (master):

* Config: ``torchrun ... -m torchtitan.train --module M --config C [--section.key value ...]``,
  parsed by tyro (``torchtitan/config/manager.py``). Booleans are flags: ``--compile.enable`` /
  ``--compile.no-enable``. Options that follow a tyro subcommand token (the reference's
  ``dataloader:chat-data-loader-config``) are applied to that subcommand only, so every
  trainer-level option has to come before it.
* Step line (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``)::

      step: {step:2}  loss: {loss:8.5f}  grad_norm: {gn:7.4f}  memory: {gib:5.2f}GiB({pct:.2f}%)
      tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}% | N/A

  on one line, each field preceded by an ANSI colour unless ``--metrics.disable_color_printing``,
  behind the logger header ``[titan] <asctime> - root - INFO - `` and, under torchrun's
  ``--tee``, the header ``[rank<local_rank>]:``. ``tps`` is tokens per second *per device*
  (tokens since the last log / (seconds x non-data-parallel size)); ``tflops`` is per device
  too. torchtitan-npu patches this line (``torchtitan_npu/patches/tools/metrics.py``) to end
  with ``elapsed_time_per_step: {s:.3f}s`` (seconds between two logs / log_freq).
  ``validate step: N ...`` lines are validation, not training steps.
* Structured logs (``torchtitan/observability/structured_logger/``, on by default via
  ``debug.enable_structured_logging``): one JSON object per line in
  ``<dump>/structured_logs/<source>.global_rank_<rank>.<YYYYmmdd-HHMMSS>-<6 chars>.jsonl``; the
  training loop wraps every step in a span ``step``, whose closing record has
  ``"log_type_name": "step_end"``, ``"step": N`` and ``"value"`` = the span's wall time in ms
  (a failing step also gets a ``step_error`` record).
* Profiler traces (``torchtitan/tools/profiler.py``):
  ``<save_traces_folder>/iteration_<step>/[<leaf>/]rank<rank>_trace.json.gz`` (chrome trace,
  gzip), one folder per profiling cycle, named by the last step it recorded. torchtitan-npu's
  ``--profiling.*`` writes torch_npu's ``*_ascend_pt/ASCEND_PROFILER_OUTPUT`` tree instead.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import strip_ansi
from afbench.errors import ConfigError, RunFailed, RunSkipped

log = logging.getLogger(__name__)

#: A torchtitan training step line (after ANSI escapes are stripped); ``validate step:`` lines
#: are left out. Group ``step`` is required; the other fields are read by name from the rest
#: of the line.
TITAN_STEP_PATTERN = r"(?<!validate )\bstep:\s*(?P<step>\d+)\s+loss:"

#: Per flavor: default config module, config function, and the python module torchrun runs.
#: torchtitan-npu's entry (``torchtitan_npu/entry.py``) applies its NPU patches
#: before torchtitan's trainer; its ``scripts/run_train.sh`` runs it as ``TRAIN_FILE``.
FLAVOR_DEFAULTS: dict[str, dict[str, str]] = {
    "torchtitan": {
        "module": "torchtitan.models.qwen3",
        "config": "qwen3_debugmodel",
        "entry": "torchtitan.train",
    },
    "torchtitan_npu": {
        "module": "torchtitan_npu.models.qwen3",
        "config": "sft_qwen3_1_7b_wordle",
        "entry": "torchtitan_npu.entry",
    },
}

#: The reference's data options (REFERENCE §1): torchtitan-npu's chat dataloader over one
#: parquet file. ``{data_path}`` is replaced by ``data.path``.
NPU_CHAT_PARQUET_ARGS = (
    "dataloader:chat-data-loader-config",
    "--dataloader.dataset-path", "parquet",
    "--dataloader.data-files", "{data_path}",
)

#: What each flavor's ``scripts/run_train.sh`` exports before torchrun (torchtitan:
#: ``run_train.sh`` at the repo root; torchtitan-npu: ``scripts/run_train.sh``). Set when the
#: engine runs torchrun directly, so that a direct run and a script run see the same settings.
LAUNCH_ENV: dict[str, dict[str, str]] = {
    "torchtitan": {"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
    "torchtitan_npu": {
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "CPU_AFFINITY_CONF": "1",
        "TASK_QUEUE_ENABLE": "2",
        "HCCL_CONNECT_TIMEOUT": "3600",
        "STREAMS_PER_DEVICE": "32",
        "MULTI_STREAM_MEMORY_RESERVE": "1",
    },
}

#: Device visibility variable per backend.
VISIBLE_DEVICES_ENV = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}

#: Settings of the afbench config that the command line does not carry: torchtitan takes them
#: from the config function (``--config``). Listed in the run's result.
NOT_TRANSLATED = (
    "scheduler.lr", "scheduler.weight_decay", "scheduler.max_grad_norm", "model.dtype",
    "model.attn_implementation", "data.packing", "data.max_samples",
    "optimization.compile.mode", "optimization.compile.fullgraph",
    "optimization.compile.dynamic", "optimization.compile.options",
    "optimization.profiler_window.record_shapes", "optimization.profiler_window.with_stack",
    "optimization.npu_profiler",
)


class TorchtitanEngine(BaseModel):
    """Run each variant with torchtitan (CUDA) or torchtitan-npu (Ascend) instead of afbench's
    builtin loop. ``module`` / ``config`` left out (or null) take the flavor's defaults:
    ``torchtitan.models.qwen3`` / ``qwen3_debugmodel``, or ``torchtitan_npu.models.qwen3`` /
    ``sft_qwen3_1_7b_wordle`` (the reference's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["torchtitan"] = "torchtitan"
    # A module holding config functions (torchtitan imports ``<module>.config_registry``, then
    # ``<module>``), so a project can ship its own.
    module: str = FLAVOR_DEFAULTS["torchtitan"]["module"]
    # A function in that module returning ``Trainer.Config``.
    config: str = FLAVOR_DEFAULTS["torchtitan"]["config"]
    # torchtitan: ``--profiler.*`` options, ``-m torchtitan.train``. torchtitan_npu:
    # ``--profiling.*`` with profile_step_start/end, ``-m torchtitan_npu.entry``, and the
    # reference's chat-parquet dataloader options.
    flavor: Literal["torchtitan", "torchtitan_npu"] = "torchtitan"
    # Appended after afbench's options and before the dataloader subcommand (tyro applies
    # options after a subcommand token to that subcommand only).
    extra_args: list[str] = []
    # torchtitan's --dump_folder, under the run directory.
    dump_folder_name: str = "titan"
    # Regex (re.search on each ANSI-stripped line) that picks the step lines; named group `step`.
    log_pattern: str = TITAN_STEP_PATTERN
    # Pass model.path as --hf_assets_path and load its HF safetensors as the initial
    # checkpoint; false: the config function names model, tokenizer and weights.
    hf_assets: bool = True
    # Python module torchrun runs (null: the flavor's entry).
    entry: str | None = None
    # A launch script run with bash instead of torchrun, e.g. torchtitan-npu's
    # scripts/run_train.sh (the reference's way); it reads NGPU, MODULE, CONFIG from the
    # environment. Relative to workdir.
    train_script: str | None = None
    # Working directory of the process (null: the run directory). The reference runs its
    # script from the torchtitan-npu checkout.
    workdir: str | None = None
    # Data options placed last (null: the reference's chat-parquet options for torchtitan_npu;
    # none for torchtitan, whose config function names the data). ``{data_path}`` is replaced.
    data_args: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _flavor_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        flavor = data.get("flavor") or "torchtitan"
        defaults = FLAVOR_DEFAULTS.get(flavor)
        if defaults is None:  # the Literal check reports it
            return data
        data = dict(data)
        for key in ("module", "config"):
            if data.get(key) is None:
                data[key] = defaults[key]
        return data

    @field_validator("log_pattern")
    @classmethod
    def _pattern_has_step(cls, v: str) -> str:
        try:
            compiled = re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regex: {exc}") from exc
        if "step" not in compiled.groupindex:
            raise ValueError("needs a named group (?P<step>...)")
        return v

    @field_validator("dump_folder_name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or "/" in v or v in (".", ".."):
            raise ValueError("must be a plain folder name (no '/')")
        return v

    @property
    def entry_module(self) -> str:
        return self.entry or FLAVOR_DEFAULTS[self.flavor]["entry"]

    @property
    def entry_package(self) -> str:
        return self.entry_module.split(".")[0]


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _resolve_backend(name: str, engine: TorchtitanEngine) -> str:
    if name == "auto":
        return "npu" if engine.flavor == "torchtitan_npu" else "cuda"
    return name


def profiler_args(spec: Any, engine: TorchtitanEngine) -> list[str]:
    """The profiler options for ``optimization.profiler_window`` (1-based, inclusive steps).

    torchtitan (``Profiler.Config``): a torch.profiler schedule repeating every
    ``profile_freq`` steps with ``wait = freq - warmup - active``; step ``k`` is profiler step
    ``k - 1``, so ``profile_freq = last``, ``profiler_active = last - first + 1``,
    ``profiler_warmup = warmup_steps`` and ``profiler_repeat = 1`` record exactly
    ``first..last`` once, written to ``<profile>/iteration_<last>/``.

    torchtitan-npu (``ProfilingConfig``, ``torchtitan_npu/tools/profiling.py``): ``active =
    end - start`` (end exclusive), one warmup step, so ``start = first``, ``end = last + 1``
    (window 6..10 -> 6, 11, as the reference). Its warmup is fixed at one step and it needs
    ``start >= 2``.

    Raises:
        ConfigError: torchtitan_npu with ``first_step < 2``.
    """
    o = spec.config.optimization
    if not o.profiler:
        return []
    w = o.profiler_window
    folder = str(Path(spec.run_dir) / "profile")
    if engine.flavor == "torchtitan_npu":
        if w.first_step < 2:
            raise ConfigError(
                "optimization.profiler_window.first_step: torchtitan-npu needs a first step "
                f">= 2 (one warmup step before it), got {w.first_step}"
            )
        return [
            "--profiling.enable_profiling",
            "--profiling.profile_step_start", str(w.first_step),
            "--profiling.profile_step_end", str(w.last_step + 1),
            "--profiling.save_traces_folder", folder,
        ]
    return [
        "--profiler.enable_profiling",
        "--profiler.save_traces_folder", folder,
        "--profiler.profile_freq", str(w.last_step),
        "--profiler.profiler_warmup", str(w.warmup_steps),
        "--profiler.profiler_active", str(w.last_step - w.first_step + 1),
        "--profiler.profiler_repeat", "1",
    ]


def trainer_args(spec: Any, engine: TorchtitanEngine) -> list[str]:
    """torchtitan options for ``spec`` (no launcher, no ``--module/--config``), in order:
    model and checkpoint, training, seed, compile, profiler, dump folder and metrics,
    ``extra_args``, then the data options (a tyro subcommand must come last).

    Raises:
        ConfigError: not an SFT run; ``model.path`` not absolute while ``hf_assets`` is on
            (torchtitan requires an absolute ``checkpoint.initial_load_path``); a profiler
            window torchtitan-npu cannot record.
        RunSkipped: a switch torchtitan cannot honour from the command line
            (``add_rmsnorm``, ``rmsnorm``, ``npugraph_ex``).
    """
    cfg = spec.config
    s = cfg.scheduler
    o = cfg.optimization
    if s.workload != "sft":
        raise ConfigError(
            f"engine.name=torchtitan runs SFT only; scheduler.workload is {s.workload!r}")
    for switch in ("add_rmsnorm", "rmsnorm", "npugraph_ex"):
        if getattr(o, switch):
            raise RunSkipped(
                f"optimization.{switch} is applied by afbench's builtin engine; torchtitan takes "
                "model rewrites from its config function (model converters such as "
                "npu_rms_norm): name a config that has them (engine.config) instead"
            )
    args: list[str] = []
    if engine.hf_assets:
        model_path = cfg.model.path
        if not os.path.isabs(model_path):
            raise ConfigError(
                f"model.path: {model_path!r} is relative; engine=torchtitan loads it as "
                "checkpoint.initial_load_path, which torchtitan requires to be absolute"
            )
        args += ["--hf_assets_path", model_path]
    if engine.hf_assets:
        # torchtitan loads nothing unless checkpointing is enabled.
        args += ["--checkpoint.enable"]
    # load_only: a benchmark run never writes checkpoints (the reference's setting).
    args += ["--checkpoint.load_only"]
    if engine.hf_assets:
        args += ["--checkpoint.initial_load_path", cfg.model.path,
                 "--checkpoint.initial_load_in_hf"]
    args += [
        "--training.steps", str(s.steps),
        "--training.seq_len", str(s.seq_len),
        "--training.global_batch_size", str(s.global_batch_size),
        "--training.local_batch_size", str(s.micro_batch_size),
        "--debug.seed", str(s.seed),
    ]
    if o.autofuse:
        # On NPU the AutoFuse codegen is torchtitan-npu's business (its entry imports
        # inductor_npu_ext); afbench only turns compilation on.
        args += ["--compile.enable", "--compile.backend", o.compile.backend]
    else:
        args += ["--compile.no-enable"]
    args += profiler_args(spec, engine)
    args += [
        "--dump_folder", str(Path(spec.run_dir) / engine.dump_folder_name),
        "--metrics.log_freq", "1",
        "--metrics.disable_color_printing",
    ]
    args += list(engine.extra_args)
    data_args = engine.data_args
    if data_args is None:
        data_args = list(NPU_CHAT_PARQUET_ARGS) if engine.flavor == "torchtitan_npu" else []
    args += [a.replace("{data_path}", cfg.data.path) for a in data_args]
    return args


def build_command(
    spec: Any, engine: TorchtitanEngine, python: str, *, backend: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv (a list, never a shell string) and the environment variables to add for one run.

    Direct (``engine.train_script`` null)::

        <python> -m torch.distributed.run --nproc_per_node=<world_size> --rdzv_backend c10d
            --rdzv_endpoint=localhost:0 --local-ranks-filter 0 --role rank --tee 3
            --log-dir <run_dir>/<dump>/torchrun -m <entry> --module M --config C <trainer args>

    ``python -m torch.distributed.run`` is torchrun (torch's ``torchrun`` console script runs
    ``torch.distributed.run:main``) on the interpreter given, which is the one checked for
    torchtitan. The torchrun options are those of the flavors' ``run_train.sh``: port 0 picks a
    free port; only local rank 0 is echoed, prefixed ``[rank0]:``; every rank's output is kept
    under ``--log-dir``. Script (``engine.train_script`` set): ``bash <script> <trainer args>``,
    with NGPU / MODULE / CONFIG / LOG_RANK (and TRAIN_FILE for a non-default entry) in the
    environment, as the reference runs ``scripts/run_train.sh``.

    Environment: ``ASCEND_RT_VISIBLE_DEVICES`` (npu) or ``CUDA_VISIBLE_DEVICES`` (cuda) from
    ``parallel.devices`` (left alone when null: ranks use devices 0..world_size-1); direct runs
    also get what the flavor's run_train.sh exports (:data:`LAUNCH_ENV`).

    Args:
        spec: the RunSpec; ``spec.config.engine`` is not read (``engine`` is).
        engine: the torchtitan engine settings.
        python: interpreter for torchrun (direct runs).
        backend: the resolved backend name; default ``spec.config.backend.name``, where
            ``auto`` means npu for torchtitan_npu and cuda for torchtitan.

    Raises:
        ConfigError, RunSkipped: see :func:`trainer_args`.
    """
    cfg = spec.config
    world_size = cfg.parallel.world_size
    backend = _resolve_backend(backend or cfg.backend.name, engine)
    flags = trainer_args(spec, engine)
    env: dict[str, str] = {}
    devices = cfg.parallel.devices
    # Under afbench's launcher the worker already holds its assigned devices as a visibility
    # mask (afbench.launch.devices); only a bare call sets it from parallel.devices.
    if (devices is not None and backend in VISIBLE_DEVICES_ENV
            and VISIBLE_DEVICES_ENV[backend] not in os.environ):
        env[VISIBLE_DEVICES_ENV[backend]] = ",".join(str(d) for d in devices)
    if engine.train_script:
        env.update(NGPU=str(world_size), MODULE=engine.module, CONFIG=engine.config, LOG_RANK="0")
        if engine.entry:
            env["TRAIN_FILE"] = engine.entry
        return ["bash", engine.train_script, *flags], env
    env.update(LAUNCH_ENV[engine.flavor])
    dump = Path(spec.run_dir) / engine.dump_folder_name
    argv = [
        python, "-m", "torch.distributed.run",
        f"--nproc_per_node={world_size}",
        "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0",
        "--local-ranks-filter", "0", "--role", "rank", "--tee", "3",
        "--log-dir", str(dump / "torchrun"),
        "-m", engine.entry_module,
        "--module", engine.module, "--config", engine.config,
        *flags,
    ]
    return argv, env


# ---------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------

_RANK_PREFIX = re.compile(r"^\[(?:[A-Za-z_]+)?(?P<rank>\d+)\]:")
_NUMBER = r"[-+]?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)"
_FIELDS = {
    "loss": re.compile(rf"\bloss:\s*(?P<v>{_NUMBER})", re.I),
    "grad_norm": re.compile(rf"\bgrad_norm:\s*(?P<v>{_NUMBER})", re.I),
    "memory": re.compile(
        rf"\bmemory:\s*(?P<v>{_NUMBER})\s*GiB\s*(?:\(\s*(?P<pct>{_NUMBER})\s*%\s*\))?", re.I),
    "tps": re.compile(rf"\btps:\s*(?P<v>{_NUMBER})", re.I),
    "tflops": re.compile(rf"\btflops:\s*(?P<v>{_NUMBER})", re.I),
    "mfu": re.compile(rf"\bmfu:\s*(?P<v>{_NUMBER}|N/A)\s*%?", re.I),
    "elapsed": re.compile(rf"\belapsed_time_per_step:\s*(?P<v>{_NUMBER})\s*s?\b", re.I),
}


def _num(raw: str | None) -> float | None:
    """A float from a printed number (thousands separators allowed); None for N/A or absent."""
    if raw is None or raw.upper() == "N/A":
        return None
    return float(raw.replace(",", ""))


def parse_titan_log(
    text: str, *, world_size: int = 1, pattern: str = TITAN_STEP_PATTERN
) -> list[dict[str, Any]]:
    """Step records from torchtitan console output, in the order they appear.

    Args:
        text: the console output: ANSI colours, logger headers and torchrun's ``[rankN]:``
            prefixes allowed.
        world_size: processes of the job; ``tokens_per_s`` = ``tps`` x ``world_size``, since
            torchtitan's ``tps`` is per device.
        pattern: regex with a named group ``step`` picking the step lines
            (:data:`TITAN_STEP_PATTERN`: not ``validate step:``).

    Returns:
        One dict per step line: ``step`` (int), ``loss``, ``grad_norm``, ``memory_gib``
        (peak reserved, GiB), ``memory_pct`` (% of device memory), ``tps_per_device`` (tokens/s
        per device, as printed), ``tokens_per_s`` (whole job), ``tflops`` (per device),
        ``mfu_pct`` (None when printed ``N/A``), ``step_time_s`` (seconds, only when the line
        carries torchtitan-npu's ``elapsed_time_per_step``, else None), ``rank`` (from a
        ``[rankN]:`` prefix, else None) and ``line`` (1-based line number). A field missing
        from the line is None; ``nan``/``inf`` are kept as floats.
    """
    compiled = re.compile(pattern)
    records: list[dict[str, Any]] = []
    for lineno, raw_line in enumerate(strip_ansi(text).splitlines(), start=1):
        match = compiled.search(raw_line)
        if match is None:
            continue
        prefix = _RANK_PREFIX.match(raw_line)
        rest = raw_line[match.start():]
        found = {name: rx.search(rest) for name, rx in _FIELDS.items()}

        def value(name: str, group: str = "v") -> float | None:
            m = found[name]
            return _num(m.group(group)) if m is not None else None

        tps = value("tps")
        records.append({
            "step": int(match.group("step")),
            "loss": value("loss"),
            "grad_norm": value("grad_norm"),
            "memory_gib": value("memory"),
            "memory_pct": value("memory", "pct"),
            "tps_per_device": tps,
            "tokens_per_s": tps * world_size if tps is not None else None,
            "tflops": value("tflops"),
            "mfu_pct": value("mfu"),
            "step_time_s": value("elapsed"),
            "rank": int(prefix.group("rank")) if prefix else None,
            "line": lineno,
        })
    return records


def step_times_from_structured_logs(dump_dir: Path | str, rank: int = 0) -> dict[int, float]:
    """Wall time (seconds) of each training step of ``rank`` from torchtitan's structured logs.

    Reads ``<dump_dir>/structured_logs/*.global_rank_<rank>.*.jsonl`` and keeps the records
    ``"log_type_name": "step_end"`` (``value`` = the ``step`` span in ms: gc, train step,
    checkpoint, validation and profiler step). Steps that also have a ``step_error`` record
    are left out; lines that are not JSON (a line cut by a crash) are skipped.

    Returns:
        ``{step: seconds}`` sorted by step; empty when there are no structured logs
        (``--debug.no-enable-structured-logging``, or a torchtitan without them).

    Raises:
        InvalidLog: a step has more than one ``step_end`` record.
    """
    folder = Path(dump_dir) / "structured_logs"
    if not folder.is_dir():
        return {}
    times: dict[int, tuple[float, str]] = {}
    failed: set[int] = set()
    for path in sorted(folder.glob(f"*.global_rank_{rank}.*.jsonl")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, start=1):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                    continue
                kind, step = rec.get("log_type_name"), rec["step"]
                if kind == "step_error":
                    failed.add(step)
                elif kind == "step_end" and isinstance(rec.get("value"), (int, float)):
                    where = f"{path.name}:{lineno}"
                    if step in times:
                        raise InvalidLog(
                            f"{folder}: step {step} has two step_end records "
                            f"({times[step][1]} and {where})"
                        )
                    times[step] = (float(rec["value"]) / 1000.0, where)
    return {step: t for step, (t, _) in sorted(times.items()) if step not in failed}


def step_time_from_tps(tps_per_device: float, world_size: int, tokens_per_step: int) -> float:
    """Step time (seconds) implied by torchtitan's per-device ``tps``.

    ``tps = local tokens / (seconds x non-data-parallel size)`` and the job's tokens per step
    (``global_batch_size x seq_len``) are the local tokens x data-parallel size, so
    ``seconds = tokens_per_step / (tps x world_size)``. With ``--metrics.log_freq 1`` that is
    the time between two step lines; ``tps`` is printed rounded to an integer.

    Raises:
        ValueError: ``tps_per_device`` is not a positive finite number.
    """
    if not (tps_per_device > 0 and math.isfinite(tps_per_device)):
        raise ValueError(f"tps {tps_per_device} is not a positive finite number")
    return tokens_per_step / (tps_per_device * world_size)


def find_titan_traces(root: Path | str) -> dict[int, list[Path]]:
    """torchtitan profiler traces below ``root`` (a dump folder or a traces folder).

    Matches ``.../iteration_<step>/[<leaf>/]rank<rank>_trace.json[.gz]`` at any depth.

    Returns:
        ``{step: [paths sorted by rank]}`` sorted by step; ``step`` is the last training step
        of that profiling cycle. Empty when there are none.
    """
    name_rx = re.compile(r"^rank(\d+)_trace\.json(?:\.gz)?$")
    iter_rx = re.compile(r"^iteration_(\d+)$")
    found: dict[int, list[tuple[int, Path]]] = {}
    root = Path(root)
    if not root.is_dir():
        return {}
    for path in root.rglob("rank*_trace.json*"):
        m = name_rx.match(path.name)
        if m is None or not path.is_file():
            continue
        for parent in path.relative_to(root).parents:
            it = iter_rx.match(parent.name)
            if it:
                found.setdefault(int(it.group(1)), []).append((int(m.group(1)), path))
                break
    return {step: [p for _, p in sorted(v)] for step, v in sorted(found.items())}


def step_records(
    parsed: list[dict[str, Any]],
    *,
    tokens_per_step: int,
    world_size: int,
    structured: dict[int, float] | None = None,
    rank: int = 0,
) -> tuple[list[dict[str, Any]], str]:
    """afbench ``metrics.jsonl`` step records from parsed step lines of one rank.

    Lines of other ranks (by ``[rankN]:`` prefix) are dropped; a step logged twice keeps its
    first line. ``step_time_s`` comes from, in order: the line's own
    ``elapsed_time_per_step`` (torchtitan-npu), the structured logs' ``step_end`` span, or
    :func:`step_time_from_tps`.

    Returns:
        (records, source): records with ``step, step_time_s, loss, grad_norm, tokens,
        tokens_per_s, tps_per_device, tflops, mfu_pct, memory_gib, memory_pct,
        step_time_source``; ``source`` names the sources used (``"log"``, ``"structured_logs"``,
        ``"tps"``, joined with ``+`` when mixed, ``"none"`` without records).
    """
    structured = structured or {}
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    sources: list[str] = []
    for rec in parsed:
        if rec["rank"] not in (None, rank) or rec["step"] in seen:
            continue
        seen.add(rec["step"])
        step = rec["step"]
        if rec["step_time_s"] is not None:
            t, src = rec["step_time_s"], "log"
        elif step in structured:
            t, src = structured[step], "structured_logs"
        elif rec["tps_per_device"] is not None and rec["tps_per_device"] > 0:
            t, src = step_time_from_tps(rec["tps_per_device"], world_size, tokens_per_step), "tps"
        else:
            t, src = None, "none"
        if src not in sources:
            sources.append(src)
        out.append({
            "step": step, "step_time_s": t, "loss": rec["loss"], "grad_norm": rec["grad_norm"],
            "tokens": tokens_per_step, "tokens_per_s": rec["tokens_per_s"],
            "tps_per_device": rec["tps_per_device"], "tflops": rec["tflops"],
            "mfu_pct": rec["mfu_pct"], "memory_gib": rec["memory_gib"],
            "memory_pct": rec["memory_pct"], "step_time_source": src,
        })
    return out, "+".join(sources) or "none"


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------

_PROBE = (
    "import importlib.util as u, sys\n"
    "missing = []\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        ok = u.find_spec(name) is not None\n"
    "    except Exception:\n"
    "        ok = False\n"
    "    if not ok:\n"
    "        missing.append(name)\n"
    "print(' '.join(missing))\n"
)


def missing_modules(
    python: str, modules: list[str], env: dict[str, str] | None = None
) -> list[str]:
    """Which of ``modules`` ``python`` cannot find (``importlib.util.find_spec``), checked in a
    subprocess so the interpreter and environment are those of the run."""
    try:
        out = subprocess.run(
            [python, "-c", _PROBE, *modules], env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{python} ({exc})"]
    if out.returncode != 0:
        return [f"{python} (exit status {out.returncode}: {out.stderr.strip()[-200:]})"]
    return out.stdout.split()


def _check_runnable(engine: TorchtitanEngine, python: str, env: dict[str, str], cwd: Path) -> None:
    if engine.train_script:
        script = Path(engine.train_script)
        script = script if script.is_absolute() else cwd / script
        if not script.is_file():
            raise RunSkipped(f"engine.train_script {script} does not exist (engine.workdir {cwd})")
        if shutil.which("torchrun", path=env.get("PATH")) is None:
            raise RunSkipped("torchrun is not on PATH, which engine.train_script needs")
        return
    wanted = ["torch", engine.entry_package]
    if engine.entry_package != "torchtitan":
        wanted.append("torchtitan")
    missing = missing_modules(python, wanted, env)
    if missing:
        raise RunSkipped(
            f"engine=torchtitan needs {', '.join(missing)} importable by {python} "
            f"(torchrun -m {engine.entry_module}); install "
            + ("torchtitan-npu" if engine.flavor == "torchtitan_npu" else "torchtitan")
            + " on the accelerator machine"
        )


def run_torchtitan(spec: Any, run_dir: Path, *, python: str = sys.executable) -> dict[str, Any]:
    """Run ``spec`` with torchtitan; returns the result record (written to result.json).

    Streams the process's output to stdout and to ``<run_dir>/<dump>/console.log``. When it
    ends, each step line becomes a ``step`` record in ``<run_dir>/metrics.jsonl`` (see
    :func:`step_records`) and, for steps whose line has no ``elapsed_time_per_step`` of its
    own, afbench prints its reference line ``step: N  loss: X  elapsed_time_per_step: Ys``, so
    the strict verdict parser finds each step exactly once in the run's log.

    Raises:
        RunSkipped: torch / torchtitan (or torchtitan_npu) not importable by ``python`` (a
            CPU-only machine), the train script missing, the backend resolving to cpu
            (torchtitan needs an accelerator, REFERENCE §7), or a switch it cannot honour.
        ConfigError: the engine is not torchtitan, or see :func:`trainer_args`.
        RunFailed: the process exits non-zero, prints no step line, or logs a non-finite loss
            (the records read so far are still written).
    """
    from afbench.engines.common import MetricsWriter, finite, step_line
    from afbench.switches import SwitchReport

    cfg = spec.config
    engine = cfg.engine
    if not isinstance(engine, TorchtitanEngine):
        raise ConfigError(
            f"engine.name: run_torchtitan needs engine=torchtitan, got {engine.name!r}")
    run_dir = Path(run_dir)
    cwd = Path(engine.workdir) if engine.workdir else run_dir
    base_env = {**os.environ, **spec.env}
    _check_runnable(engine, python, base_env, cwd)

    backend = cfg.backend.name
    if backend == "auto":
        from afbench.backends.base import detect_backend

        backend = detect_backend()
    if backend == "cpu":
        raise RunSkipped(
            "engine=torchtitan needs an accelerator (cuda or npu): torchtitan does not train on "
            "CPU (it sets a device, FlexAttention has no CPU backward, gloo lacks PREMUL_SUM)"
        )
    argv, extra_env = build_command(spec, engine, python, backend=backend)
    env = {**os.environ, **extra_env, **spec.env}
    dump = run_dir / engine.dump_folder_name
    dump.mkdir(parents=True, exist_ok=True)
    console = dump / "console.log"
    print("afbench.torchtitan: " + " ".join(argv), flush=True)

    with open(console, "wb") as sink:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            for chunk in proc.stdout:  # lines, as bytes
                sink.write(chunk)
                sink.flush()
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
            code = proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise

    s = cfg.scheduler
    world_size = cfg.parallel.world_size
    tokens_per_step = s.global_batch_size * s.seq_len
    text = console.read_text(encoding="utf-8", errors="replace")
    parsed = parse_titan_log(text, world_size=world_size, pattern=engine.log_pattern)
    try:
        structured = step_times_from_structured_logs(dump)
    except InvalidLog as exc:
        log.warning("ignoring structured logs: %s", exc)
        structured = {}
    records, source = step_records(parsed, tokens_per_step=tokens_per_step,
                                   world_size=world_size, structured=structured)
    metrics = MetricsWriter(run_dir / "metrics.jsonl")
    try:
        for rec in records:
            metrics.write("step", **rec)
            # A line with its own elapsed_time_per_step (torchtitan-npu) already serves the
            # verdict parser; a second line for the step would make it a duplicate.
            if rec["step_time_source"] != "log" and rec["step_time_s"] is not None:
                loss = rec["loss"] if rec["loss"] is not None else float("nan")
                tps = rec["tokens_per_s"]
                extra = {"tokens_per_s": round(tps, 1)} if tps else {}
                print(step_line(rec["step"], loss, rec["step_time_s"], **extra), flush=True)
    finally:
        metrics.close()

    if code != 0:
        tail = next((ln for ln in reversed(strip_ansi(text).splitlines()) if ln.strip()), "")
        raise RunFailed(f"torchtitan exited with status {code}: {tail.strip()[:300]}")
    if not records:
        raise RunFailed(
            f"torchtitan printed no step line matching engine.log_pattern ({console})"
        )
    bad = next((r for r in records if r["loss"] is not None and not finite(r["loss"])), None)
    if bad is not None:
        raise RunFailed(f"loss is {bad['loss']} at step {bad['step']}")

    o = cfg.optimization
    switches = []
    if o.autofuse:
        switches.append(SwitchReport("autofuse", True, "torchtitan --compile.enable "
                                     f"--compile.backend {o.compile.backend}"))
    if o.profiler:
        w = o.profiler_window
        switches.append(SwitchReport("profiler", True, f"torchtitan {engine.flavor} profiler, "
                                     f"steps {w.first_step}-{w.last_step}"))
    traces = find_titan_traces(run_dir / "profile")
    return {
        "workload": "sft",
        "engine": "torchtitan",
        "flavor": engine.flavor,
        "backend": backend,
        "python": sys.version.split()[0],
        "argv": argv,
        "env": extra_env,
        "tokens_per_step": tokens_per_step,
        "first_step_s": records[0]["step_time_s"],
        "step_time_source": source,
        "dump_folder": str(dump),
        "profile_traces": {str(k): [str(p) for p in v] for k, v in traces.items()},
        "not_translated": list(NOT_TRANSLATED) + [
            key for key, path in (("model.path", cfg.model.path), ("data.path", cfg.data.path))
            if not any(path in a for a in argv)],
        "switches": [vars(sw) for sw in switches],
    }
