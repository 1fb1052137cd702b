"""Running one torchtitan job: check that it can start, run it as a child of the worker, and
turn its outputs into afbench's ``metrics.jsonl`` records and reference step lines."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from afbench.analysis.contention import WindowSampler
from afbench.analysis.efficiency import titan_efficiency, training_efficiency
from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import log_lines, non_finite_loss, read_log, step_line
from afbench.backends.resolve import resolve_backend
from afbench.config.engines import AFBENCH_TITAN_MODULE, TorchtitanEngine
from afbench.engines.metrics import MetricsWriter
from afbench.engines.process import run_child
from afbench.engines.torchtitan.cmdline import (
    CPU_ENTRY,
    CPU_LABEL,
    NOT_TRANSLATED,
    build_command,
    entry_module,
)
from afbench.engines.torchtitan.parsers import (
    find_titan_traces,
    parse_titan_log,
    step_records,
    step_times_from_structured_logs,
)
from afbench.errors import ConfigError, RunFailed, RunSkipped
from afbench.messages import say
from afbench.runspec import RunSpec
from afbench.store.names import METRICS
from afbench.store.result import RunResult
from afbench.switches.registry import titan_reports

log = logging.getLogger(__name__)

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
            [python, "-c", _PROBE, *modules],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{python} ({exc})"]
    if out.returncode != 0:
        return [f"{python} (exit status {out.returncode}: {out.stderr.strip()[-200:]})"]
    return out.stdout.split()


def _check_runnable(
    engine: TorchtitanEngine, python: str, env: dict[str, str], cwd: Path, entry: str
) -> None:
    if engine.train_script:
        script = Path(engine.train_script)
        script = script if script.is_absolute() else cwd / script
        if not script.is_file():
            raise RunSkipped(f"engine.train_script {script} does not exist (engine.workdir {cwd})")
        if shutil.which("torchrun", path=env.get("PATH")) is None:
            raise RunSkipped("torchrun is not on PATH, which engine.train_script needs")
        return
    package = entry.split(".")[0]
    wanted = ["torch", package]
    if package != "torchtitan":
        wanted.append("torchtitan")
    missing = missing_modules(python, wanted, env)
    if missing:
        raise RunSkipped(
            f"engine=torchtitan needs {', '.join(missing)} importable by {python} "
            f"(torchrun -m {entry}); install "
            + ("torchtitan-npu" if engine.flavor == "torchtitan_npu" else "torchtitan")
            + " on the accelerator machine"
        )


def run_torchtitan(spec: RunSpec, run_dir: Path, *, python: str = sys.executable) -> RunResult:
    """Run ``spec`` with torchtitan; returns its result (written to result.json).

    Streams the process's output to stdout and to ``<run_dir>/<dump>/console.log``
    (:func:`afbench.engines.process.run_child`). When it
    ends, each step line becomes a ``step`` record in ``<run_dir>/metrics.jsonl`` (see
    :func:`step_records`) and, for steps whose line has no ``elapsed_time_per_step`` of its
    own, afbench prints its reference line ``step: N  loss: X  elapsed_time_per_step: Ys``, so
    the strict verdict parser finds each step exactly once in the run's log.

    Raises:
        RunSkipped: torch / torchtitan (or torchtitan_npu) not importable by ``python``, the
            train script missing, or a switch it cannot honour. A cpu run uses afbench's CPU
            entry (:mod:`afbench.engines.torchtitan.cpu_entry`); its result's ``device`` says
            so (:data:`afbench.engines.torchtitan.cmdline.CPU_LABEL`).
        ConfigError: the engine is not torchtitan, or see :func:`trainer_args`.
        RunFailed: the process exits non-zero, prints no step line, logs a step twice on the
            logging rank, or logs a non-finite loss (the records read so far are still
            written).

    The result carries torchtitan's own memory, TFLOPs and MFU of the measured window
    (:func:`afbench.analysis.efficiency.titan_efficiency`, under the common field names) and,
    when ``model.path`` holds a ``config.json``, afbench's own FLOP count as
    ``afbench_tflops_per_device`` / ``afbench_mfu_pct`` / ``afbench_tflops_source``.
    """
    cfg = spec.config
    engine = cfg.engine
    if not isinstance(engine, TorchtitanEngine):
        raise ConfigError(
            f"engine.name: run_torchtitan needs engine=torchtitan, got {engine.name!r}"
        )
    run_dir = Path(run_dir)
    cwd = Path(engine.workdir) if engine.workdir else run_dir
    base_env = {**os.environ, **spec.env}
    backend = spec.backend or resolve_backend(cfg.backend.name)
    _check_runnable(engine, python, base_env, cwd, entry_module(engine, backend))
    argv, extra_env = build_command(spec, engine, python, backend=backend)
    env = {**os.environ, **extra_env, **spec.env}
    dump = run_dir / engine.dump_folder_name
    dump.mkdir(parents=True, exist_ok=True)
    console = dump / "console.log"
    print("afbench.torchtitan: " + " ".join(argv), flush=True)

    # contention over the whole run: torchtitan's ranks log no line afbench can time the
    # window's edges by (afbench.analysis.contention; the command engine does)
    whole = WindowSampler(
        threads=None,
        scope="run",
        source="the whole torchtitan run (torchrun and the ranks it waited for)",
    )
    whole.start()
    with open(console, "wb") as sink:
        child = run_child(argv, cwd=cwd, env=env, grace_s=spec.kill_grace_s, copy_to=sink)
    whole.end()
    code = child.code

    s = cfg.scheduler
    world_size = cfg.parallel.world_size
    tokens_per_step = s.global_batch_size * s.seq_len
    text = read_log(console)
    parsed = parse_titan_log(text, world_size=world_size, pattern=engine.log_pattern)
    try:
        structured = step_times_from_structured_logs(dump)
    except InvalidLog as exc:
        log.warning("ignoring structured logs: %s", exc)
        structured = {}
    try:
        records, source = step_records(
            parsed,
            tokens_per_step=tokens_per_step,
            world_size=world_size,
            structured=structured,
            source=str(console),
        )
        invalid = None
    except InvalidLog as exc:
        records, source, invalid = [], "none", str(exc)
    metrics = MetricsWriter(run_dir / METRICS)
    try:
        for rec in records:
            metrics.write("step", **rec)
            # A line with its own elapsed_time_per_step (torchtitan-npu) already serves the
            # verdict parser; a second line for the step would make it a duplicate.
            if rec["step_time_source"] != "log" and rec["step_time_s"] is not None:
                loss = (
                    rec["loss"]
                    if rec["loss"] is not None
                    else -1.0
                    if rec.get("loss_placeholder")
                    else float("nan")
                )
                tps = rec["tokens_per_s"]
                extra = {"tokens_per_s": round(tps, 1)} if tps else {}
                print(step_line(rec["step"], loss, rec["step_time_s"], **extra), flush=True)
    finally:
        metrics.close()

    if child.forwarded:
        raise RunFailed(
            f"stopped by {signal.Signals(child.forwarded).name} sent to the worker "
            f"(forwarded to torchtitan, which exited with {code})"
        )
    if code != 0:
        tail = next((ln for _, ln in reversed(list(log_lines(text)))), "")
        raise RunFailed(f"torchtitan exited with status {code}: {tail.strip()[:300]}")
    if invalid:
        raise RunFailed(invalid)
    if not records:
        raise RunFailed(f"torchtitan printed no step line matching engine.log_pattern ({console})")
    bad = next(
        (
            why
            for r in records
            if r["loss"] is not None and (why := non_finite_loss(r["loss"], r["step"]))
        ),
        None,
    )
    if bad is not None:
        raise RunFailed(bad)

    switches = titan_reports(cfg, engine.flavor, Path(spec.run_dir))
    traces = find_titan_traces(run_dir / "profile")
    window = s.measure
    return RunResult.from_fields(
        {
            "workload": "sft",
            "engine": "torchtitan",
            "flavor": engine.flavor,
            "backend": backend,
            # afbench's CPU entry: named so that no reader takes it for a GPU/NPU run
            **({"device": CPU_LABEL} if CPU_ENTRY in argv else {}),
            "python": sys.version.split()[0],
            "argv": argv,
            "env": extra_env,
            "tokens_per_step": tokens_per_step,
            "first_step_s": records[0]["step_time_s"],
            "step_time_source": source,
            "dump_folder": str(dump),
            "profile_traces": {str(k): [str(p) for p in v] for k, v in traces.items()},
            "not_translated": list(NOT_TRANSLATED)
            + [
                key
                for key, path in (("model.path", cfg.model.path), ("data.path", cfg.data.path))
                if not any(path in a for a in argv)
                and not (engine.module == AFBENCH_TITAN_MODULE and path in extra_env.values())
            ],
            "switches": [vars(sw) for sw in switches],
            "contention": whole.record(),
            **titan_efficiency(records, window.first_step, window.last_step),
            "memory_window": say(
                "memory_window_logged", first=window.first_step, last=window.last_step
            ),
            **_afbench_count(spec, records, backend),
        }
    )


def _afbench_count(spec: RunSpec, records: list[dict[str, Any]], backend: str) -> dict[str, Any]:
    """afbench's FLOP count of the measured window beside torchtitan's own figures:
    ``afbench_tflops_per_device``, ``afbench_mfu_pct``, ``afbench_tflops_source``,
    ``flops_per_token``, ``peak_tflops`` and its source (all None, with the reason, without a
    readable ``<model.path>/config.json`` or step times)."""
    cfg = spec.config
    s = cfg.scheduler
    window = [
        r
        for r in records
        if s.measure.first_step <= r["step"] <= s.measure.last_step and r["step_time_s"]
    ]
    path = Path(cfg.model.path) / "config.json"
    try:
        model_config = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        return {
            "flops_per_token": None,
            "peak_tflops": None,
            "peak_tflops_source": None,
            "afbench_tflops_per_device": None,
            "afbench_mfu_pct": None,
            "afbench_tflops_source": say("na_unreadable", path=str(path), error=str(exc)),
        }
    # no torch in this worker: the device's name is unknown, so MFU needs backend.peak_tflops
    out = training_efficiency(
        model_config,
        s.seq_len,
        s.global_batch_size * s.seq_len * len(window),
        sum(r["step_time_s"] for r in window),
        cfg.parallel.world_size,
        peak_tflops=cfg.backend.peak_tflops,
        device_name=backend,
        dtype=cfg.model.dtype,
    )
    return {
        "flops_per_token": out["flops_per_token"],
        "peak_tflops": out["peak_tflops"],
        "peak_tflops_source": out["peak_tflops_source"],
        "afbench_tflops_per_device": out["tflops_per_device"],
        "afbench_mfu_pct": out["mfu_pct"],
        "afbench_tflops_source": out["tflops_source"],
    }
