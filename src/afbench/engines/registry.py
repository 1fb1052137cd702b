"""The engines, by name: the one place that knows which engines exist.

An engine is a schema in :mod:`afbench.config.engines` plus one entry in :data:`ENGINES`; the
planner calls :meth:`Engine.check` for every variant and phase (no torch import, raises
ConfigError naming the key, so a bad setting exits 2 before anything runs), the launcher reads
:attr:`Engine.torchrun`, and the worker calls :meth:`Engine.run`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from afbench.backends.resolve import get_backend, probe_backend, resolve_backend
from afbench.config.engines import CommandEngine, TorchtitanEngine
from afbench.config.models import RunConfig, SftScheduler
from afbench.engines import command
from afbench.engines.torchtitan import cmdline as titan_cmdline
from afbench.errors import ConfigError, RunFailed
from afbench.runspec import RunSpec
from afbench.store.result import RunResult


class Engine(Protocol):
    """How one kind of workload runner plugs into afbench."""

    #: ``engine.name`` in the config (the discriminator of :data:`~afbench.config.engines.EngineConfig`).
    name: str
    #: True when the worker itself is one process per rank, started under torchrun by the
    #: launcher for ``parallel.world_size > 1``; False when the engine starts its own ranks.
    torchrun: bool

    def check(self, rc: RunConfig) -> None:
        """Plan-time checks of one run's config beyond its schema; cheap, no torch import.

        Raises ConfigError naming the dotted key and the fix."""

    def run(self, spec: RunSpec, run_dir: Path) -> RunResult:
        """Run ``spec`` inside the worker; returns its result (the worker writes it to
        result.json: :data:`afbench.store.result.RESULT_FILE`).

        Raises RunFailed, RunSkipped or ConfigError as the worker protocol says."""


@dataclass(frozen=True)
class BuiltinRunner:
    """afbench's own SFT and inference loops (:mod:`afbench.engines.sft`, ``.infer``)."""

    name: str = "builtin"
    torchrun: bool = True

    def check(self, rc: RunConfig) -> None:
        """tp_size 1, the global batch a whole number of micro batches per rank, and the
        sequence within the model's ``max_position_embeddings`` (from its config.json, when
        readable; preflight reports an unreadable model folder)."""
        s = rc.scheduler
        if rc.parallel.tp_size != 1:
            raise ConfigError("parallel.tp_size: > 1 is not supported by the builtin engine; use 1")
        if isinstance(s, SftScheduler):
            per_step = s.micro_batch_size * rc.parallel.world_size
            if s.global_batch_size % per_step:
                raise ConfigError(
                    f"scheduler.global_batch_size {s.global_batch_size} is not divisible by "
                    f"micro_batch_size x world_size = {per_step}"
                )
        _check_model_limits(rc)

    def run(self, spec: RunSpec, run_dir: Path) -> RunResult:
        name = spec.backend or resolve_backend(spec.config.backend.name)
        _, problem = probe_backend(name)
        if problem:
            raise RunFailed(
                f"backend {name} was planned for this run but is not usable here: "
                f"{problem}; set backend=cpu or fix the device setup"
            )
        backend = get_backend(name, spec.config.backend.num_threads)
        if spec.config.scheduler.workload == "sft":
            from afbench.engines.sft import run_sft  # torch, transformers: worker only

            return run_sft(spec, backend, run_dir)
        from afbench.engines.infer import run_infer  # torch, transformers: worker only

        return run_infer(spec, backend, run_dir)


@dataclass(frozen=True)
class CommandRunner:
    """A user's own executable per run (:mod:`afbench.engines.command`)."""

    name: str = "command"
    torchrun: bool = False

    def check(self, rc: RunConfig) -> None:
        """``engine.executable`` an absolute path to an executable file, every ``{placeholder}``
        of ``engine.args`` a known one, ``engine.step_pattern`` a regex with groups ``step``
        and ``value``; one node (the command starts its own processes)."""
        assert isinstance(rc.engine, CommandEngine)
        if rc.parallel.nnodes > 1:
            raise ConfigError(
                f"parallel.nnodes: {rc.parallel.nnodes} nodes are started by the "
                "builtin and torchtitan engines; engine=command runs your command "
                "once, on this node: set parallel.nnodes=1 and let it start its "
                "nodes"
            )
        command.check_executable(rc.engine)
        command.check_placeholders(rc.engine)
        command.step_regex(rc.engine)

    def run(self, spec: RunSpec, run_dir: Path) -> RunResult:
        return command.run_command(spec, run_dir)


@dataclass(frozen=True)
class TorchtitanRunner:
    """torchtitan / torchtitan-npu under torchrun (:mod:`afbench.engines.torchtitan`)."""

    name: str = "torchtitan"
    torchrun: bool = False  # it starts torchrun itself, one rank per device

    def check(self, rc: RunConfig) -> None:
        """SFT only, a model torchtitan's Qwen3 can build, a profiler window the
        flavor can record (:func:`afbench.engines.torchtitan.cmdline.check_config`)."""
        assert isinstance(rc.engine, TorchtitanEngine)
        titan_cmdline.check_config(rc, rc.engine)

    def run(self, spec: RunSpec, run_dir: Path) -> RunResult:
        # the torchtitan launcher (subprocess, log parsers): only in a torchtitan worker
        from afbench.engines.torchtitan.run import run_torchtitan

        return run_torchtitan(spec, run_dir)


ENGINES: dict[str, Engine] = {
    e.name: e for e in (BuiltinRunner(), CommandRunner(), TorchtitanRunner())
}


def engine_for(rc: RunConfig) -> Engine:
    """The engine of a run config (``rc.engine.name``).

    Raises ConfigError naming ``engine.name`` for a name with a schema but no entry here."""
    try:
        return ENGINES[rc.engine.name]
    except KeyError:
        raise ConfigError(
            f"engine.name: {rc.engine.name!r} has a schema but no registered "
            f"engine; known: {', '.join(ENGINES)}"
        ) from None


def _check_model_limits(rc: RunConfig) -> None:
    """seq_len / prompt length within the model's max_position_embeddings (from its
    config.json), so a too-long sequence fails now rather than in the worker."""
    cfg_file = Path(rc.model.path) / "config.json"
    if not cfg_file.is_file():
        return
    try:
        max_pos = json.loads(cfg_file.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return  # preflight reports an unreadable model folder
    s = rc.scheduler
    length = getattr(s, "seq_len", None) or (
        getattr(s, "input_truncated_len", 0) + getattr(s, "max_new_tokens", 0)
    )
    if max_pos and length > max_pos:
        key = (
            "scheduler.seq_len"
            if hasattr(s, "seq_len")
            else "scheduler.input_truncated_len + max_new_tokens"
        )
        raise ConfigError(
            f"{key} = {length} exceeds the model's max_position_embeddings {max_pos} ({cfg_file})"
        )
