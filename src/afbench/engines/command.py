"""The command engine: a user's own executable per run (``engine=command``).

docs/reference.md §1 lets a user supply their own absolute-path train command; this engine runs one
such command per RunSpec, as a child of the worker and in the worker's process group (so the
launcher's group kill on timeout or Ctrl-C reaches it; :mod:`afbench.engines.process`). Its output
is copied line by line to
the worker's stdout (the run's ``stdout.log``, parsed strictly by :mod:`afbench.collect`), and
every line matching ``engine.step_pattern`` becomes a ``metrics.jsonl`` step record.

Nothing here imports torch or loads a backend: the command owns the device.
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from afbench.analysis.contention import WindowSampler
from afbench.analysis.efficiency import not_reported
from afbench.analysis.steplog import (
    DEFAULT_STEP_PATTERN,
    compile_step_pattern,
    is_placeholder_loss,
    log_lines,
    non_finite_loss,
)
from afbench.config.engines import CommandEngine
from afbench.config.models import RunConfig
from afbench.engines.metrics import MetricsWriter
from afbench.engines.process import run_child
from afbench.errors import ConfigError, RunFailed
from afbench.runspec import RunSpec
from afbench.store.names import METRICS
from afbench.store.result import RunResult
from afbench.switches.registry import switch_names

ENV_PREFIX = "AFBENCH_"
# The names run_values fills besides the switches (a test pins the two together), so that plan
# time can check engine.args' placeholders before anything runs.
RUN_PLACEHOLDERS = (
    "run_dir",
    "profile_dir",
    "mode",
    "steps",
    "seed",
    "model_path",
    "data_path",
    "devices",
    "world_size",
    "seq_len",
    "global_batch_size",
    "variant",
    "phase",
    "round",
)
#: placeholders renamed: the old name -> the new (build_argv refuses the old in one line)
RENAMED_PLACEHOLDERS = {"repeat": "round"}


def placeholders() -> tuple[str, ...]:
    """Every ``{placeholder}`` of ``engine.args``: :data:`RUN_PLACEHOLDERS`, then one per
    registered switch (:data:`afbench.switches.registry.SWITCHES`)."""
    names = switch_names()
    clash = sorted(set(names) & set(RUN_PLACEHOLDERS))
    if clash:  # {mode} would silently become the switch's value
        raise ConfigError(
            f"switch name {clash[0]!r} (afbench.switches.registry.SWITCHES) is the "
            f"command engine's placeholder {{{clash[0]}}}: rename the switch"
        )
    return RUN_PLACEHOLDERS + names


def run_values(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """Values of the ``{placeholders}`` in ``engine.args`` (and of the ``AFBENCH_*`` variables).

    Keys: run_dir, profile_dir (``<run_dir>/profile``), mode (``profile`` when
    optimization.profiler is on, else ``train``), steps, seed, model_path, data_path, devices
    (comma-separated ids, ``""`` when unset), world_size, seq_len, global_batch_size (``""``
    for a scheduler without them), variant, phase, round (the run's round, 1-based), and every registered switch
    (add_rmsnorm, rmsnorm, autofuse, npugraph_ex, profiler, ...: ``true`` / ``false``).
    """
    cfg: RunConfig = spec.config
    s = cfg.scheduler
    devices = cfg.parallel.devices
    return {
        "run_dir": str(run_dir),
        "profile_dir": str(run_dir / "profile"),
        "mode": "profile" if cfg.optimization.profiler else "train",
        "steps": s.steps,
        "seed": s.seed,
        "model_path": cfg.model.path,
        "data_path": cfg.data.path,
        "devices": ",".join(str(d) for d in devices) if devices else "",
        "world_size": cfg.parallel.world_size,
        "seq_len": getattr(s, "seq_len", ""),
        "global_batch_size": getattr(s, "global_batch_size", ""),
        "variant": spec.variant,
        "phase": spec.phase,
        "round": spec.repeat,
        # the switches, so the command can honour them: "true" / "false"
        **{name: str(getattr(cfg.optimization, name)).lower() for name in switch_names()},
    }


def check_executable(engine: CommandEngine) -> str:
    """``engine.executable`` if it is an absolute path to an executable file.

    Raises ConfigError naming ``engine.executable`` otherwise. There is no PATH lookup and no
    shell: what runs is exactly this file.
    """
    exe = engine.executable
    if not os.path.isabs(exe):
        raise ConfigError(
            f"engine.executable: {exe!r} is not an absolute path; "
            "set engine.executable=/abs/path/to/program (no PATH lookup)"
        )
    if not os.path.isfile(exe):
        raise ConfigError(f"engine.executable: {exe} does not exist or is not a file")
    if not os.access(exe, os.X_OK):
        raise ConfigError(
            f"engine.executable: {exe} is not executable; chmod +x it, or set "
            "engine.executable to its interpreter and put it first in engine.args"
        )
    return exe


def build_argv(engine: CommandEngine, values: dict[str, Any]) -> list[str]:
    """``[executable, *args]`` with each arg's ``{placeholders}`` filled by ``str.format_map``.

    Raises ConfigError naming ``engine.args[i]`` for an unknown placeholder or a malformed
    one (a literal brace is written ``{{`` or ``}}``).
    """
    argv = [check_executable(engine)]
    for i, arg in enumerate(engine.args):
        try:
            argv.append(arg.format_map(values))
        except KeyError as exc:
            new = RENAMED_PLACEHOLDERS.get(exc.args[0])
            if new is not None:
                raise ConfigError(
                    f"engine.args[{i}]: {{{exc.args[0]}}} is now {{{new}}}: write {{{new}}} "
                    f"in {arg!r}"
                ) from None
            raise ConfigError(
                f"engine.args[{i}]: unknown placeholder {{{exc.args[0]}}} in {arg!r}; known: "
                + ", ".join("{" + k + "}" for k in values)
            ) from None
        except (ValueError, IndexError, AttributeError) as exc:
            raise ConfigError(
                f"engine.args[{i}]: malformed placeholder in {arg!r} ({exc}); "
                "write a literal brace as {{ or }}"
            ) from None
    return argv


def check_placeholders(engine: CommandEngine) -> None:
    """Plan-time check of ``engine.args``: every ``{placeholder}`` is one of
    :func:`placeholders` and well formed. Raises ConfigError naming ``engine.args[i]``."""
    build_argv(engine, dict.fromkeys(placeholders(), ""))


def command_env(engine: CommandEngine, values: dict[str, Any]) -> dict[str, str]:
    """The worker's environment, plus ``AFBENCH_<KEY>`` for every run value, plus
    ``engine.env`` (last, so an explicit setting wins)."""
    env = dict(os.environ)
    env.update({ENV_PREFIX + k.upper(): str(v) for k, v in values.items()})
    env.update(engine.env)
    return env


def step_regex(engine: CommandEngine) -> re.Pattern[str]:
    """The compiled ``engine.step_pattern`` (null: :data:`DEFAULT_STEP_PATTERN`, the
    reference's step line); ConfigError naming it when it is unusable."""
    try:
        return compile_step_pattern(engine.step_pattern or DEFAULT_STEP_PATTERN)
    except ValueError as exc:
        raise ConfigError(f"engine.step_pattern: {exc}") from None


def _number(raw: str | None) -> float | None:
    """A float from a captured token (a trailing unit ``s`` dropped), or None."""
    if raw is None:
        return None
    token = raw.strip()
    if token.endswith("s"):
        token = token[:-1].rstrip()
    try:
        return float(token)
    except ValueError:
        return None


class _StepLines:
    """Turns output lines into step records; remembers what the outcome needs."""

    def __init__(
        self,
        regex: re.Pattern[str],
        metrics: MetricsWriter,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        self.regex = regex
        self.metrics = metrics
        self.on_step = on_step  # called with each matched step number, as its line arrives
        self.extra = [g for g in regex.groupindex if g not in ("step", "value")]
        self.count = 0
        self.first_step_s: float | None = None
        self.bad_loss: str | None = None
        self.last_line = ""

    def feed(self, text: str) -> None:
        # the same lines as the strict parse in analysis.steplog (log_lines: carriage-return
        # redraws split, tqdm bars cut off), so both read each step line once
        for _, line in log_lines(text):
            self.last_line = line.strip()
            self._match(line)

    def _match(self, line: str) -> None:
        match = self.regex.search(line)
        if match is None or match.group("step") is None:
            return
        try:
            step = int(match.group("step"))
        except ValueError:
            return  # the strict log parse in collect reports it
        value = _number(match.group("value"))
        step_time_s = value if value is not None and math.isfinite(value) else None
        record: dict[str, Any] = {"step": step, "step_time_s": step_time_s}
        for name in self.extra:
            number = _number(match.group(name))
            if number is not None:
                record[name] = number
        if is_placeholder_loss(record.get("loss")):
            # pipeline parallelism: the logged rank computes no loss and prints -1
            del record["loss"]
            record["loss_placeholder"] = True
        self.metrics.write("step", **record)
        self.count += 1
        if self.on_step is not None:
            self.on_step(step)
        if self.first_step_s is None:
            self.first_step_s = step_time_s
        loss = record.get("loss")
        if loss is not None and self.bad_loss is None:
            self.bad_loss = non_finite_loss(loss, step)


def run_command(spec: RunSpec, run_dir: Path) -> RunResult:
    """Run ``spec``'s command once; returns the result record (written to result.json).

    Returns ``{"workload", "engine": "command", "argv", "first_step_s" (seconds, the first
    matched step line), "steps_logged", "command_wall_s"}``.

    Raises:
        ConfigError: executable not absolute / missing / not executable, unknown placeholder
            in engine.args, unusable engine.step_pattern.
        RunFailed: the command exited non-zero, was killed by a signal, logged a NaN/inf loss
            (when the pattern has a ``loss`` group), or logged no step line at all.
    """
    engine = spec.config.engine
    assert isinstance(engine, CommandEngine)
    run_dir = Path(run_dir)
    values = run_values(spec, run_dir)
    argv = build_argv(engine, values)
    regex = step_regex(engine)
    if values["mode"] == "profile":
        Path(values["profile_dir"]).mkdir(exist_ok=True)
    print("afbench.command: " + " ".join(argv), flush=True)

    metrics = MetricsWriter(run_dir / METRICS)
    env = command_env(engine, values)
    window, whole = contention_samplers(spec, env)
    steps = _StepLines(regex, metrics, on_step=lambda step: window_edge(window, spec, step))

    def on_line(text: str) -> bool:
        steps.feed(text)
        return steps.bad_loss is not None  # stop the command at its first non-finite loss

    def on_start(pid: int) -> None:
        window.pid = pid
        if spec.config.scheduler.measure.first_step == 1:
            window.start()

    whole.start()
    try:
        child = run_child(
            argv,
            cwd=run_dir,
            env=env,
            grace_s=spec.kill_grace_s,
            on_line=on_line,
            on_start=on_start,
        )
    finally:
        metrics.close()
    whole.end()
    code, wall_s = child.code, child.wall_s

    if steps.bad_loss:
        raise RunFailed(steps.bad_loss)
    tail = f"; last output: {steps.last_line[:200]}" if steps.last_line else ""
    if child.forwarded:
        raise RunFailed(
            f"stopped by {signal.Signals(child.forwarded).name} sent to the worker "
            f"(forwarded to the command, which exited with {code})"
        )
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        raise RunFailed(f"command killed by {name}{hint}")
    if code != 0:
        raise RunFailed(f"command exited with status {code}{tail}")
    if steps.count == 0:
        raise RunFailed(
            f"no step lines matched engine.step_pattern (named groups step and "
            f"value, seconds per step; a torchtitan log: engine=torchtitan){tail}"
        )
    return RunResult.from_fields(
        {
            "workload": spec.config.scheduler.workload,
            "engine": "command",
            "argv": argv,
            "first_step_s": steps.first_step_s,
            "steps_logged": steps.count,
            "command_wall_s": round(wall_s, 3),
            "contention": window.record() or whole.record(),
            **not_reported("command"),
        }
    )


def contention_samplers(spec: RunSpec, env: dict[str, str]) -> tuple[WindowSampler, WindowSampler]:
    """Two samplers of a command run (:mod:`afbench.analysis.contention`): the measured
    window, whose edges are the arrival of the step lines ``first_step - 1`` (or the
    command's start) and ``last_step`` (the command's process tree, read from /proc while it
    runs), and the whole run (this worker and the children it waited for, os.times()), the
    record used when the window's edges were not seen. Threads asked: the command's
    ``OMP_NUM_THREADS`` when it is a positive integer, else unknown."""
    w = spec.config.scheduler.measure
    raw = env.get("OMP_NUM_THREADS", "")
    threads = int(raw) if raw.isdigit() and int(raw) > 0 else None
    window = WindowSampler(
        threads=threads,
        scope="window",
        source=f"command process tree, steps {w.first_step}-{w.last_step} "
        "(from the step lines' arrival)",
    )
    whole = WindowSampler(
        threads=threads,
        scope="run",
        source="the whole command run (its step lines did not mark the window)",
    )
    return window, whole


def window_edge(window: WindowSampler, spec: RunSpec, step: int) -> None:
    """Sample the window's start at step line ``first_step - 1`` and its end at
    ``last_step``; a step logged twice does not move an edge already taken."""
    w = spec.config.scheduler.measure
    if step == w.first_step - 1 and window.first is None:
        window.start()
    elif step == w.last_step:
        window.end()
