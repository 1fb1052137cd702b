"""Schemas of the engines (``engine=builtin | command | torchtitan``, conf/engine/*.yaml).

Each engine is one schema here plus one entry in :mod:`afbench.engines.registry`; the union
:data:`EngineConfig` is discriminated by ``name``. Nothing here imports an engine: the
schemas hold only what validation needs (defaults, patterns, field checks).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from afbench.config.base import LocalPath, Section, env_vars


class BuiltinEngine(Section):
    """afbench's own worker (SFT and inference loops)."""

    name: Literal["builtin"] = "builtin"


class CommandEngine(Section):
    """A user's own executable per run (the reference's custom train command): an absolute
    path and an argv list (never a shell string); ``{placeholders}`` in args are filled from
    the run (see afbench.engines.command)."""

    name: Literal["command"] = "command"
    executable: str
    args: list[str] = []
    # Regex with named groups `step` and `value` (seconds), optionally `loss`, for the step
    # lines of its output; null = the reference's `step: N ... elapsed_time_per_step: X[s]`
    # (afbench.analysis.steplog.DEFAULT_STEP_PATTERN, filled in by whoever parses the log).
    step_pattern: str | None = None
    env: dict[str, str] = {}

    _env = field_validator("env", mode="before")(classmethod(lambda cls, v: env_vars(v)))


#: A torchtitan training step line (after ANSI escapes are stripped); ``validate step:`` lines
#: are left out. Group ``step`` is required; the other fields are read by name from the rest
#: of the line.
TITAN_STEP_PATTERN = r"(?<!validate )\bstep:\s*(?P<step>\d+)\s+loss:"

#: afbench's own torchtitan config function (``qwen3_from_hf``): the model of ``model.path``
#: built from its config.json, trained on ``data.path`` (afbench.engines.torchtitan.qwen3).
AFBENCH_TITAN_MODULE = "afbench.engines.torchtitan.qwen3"

#: Per flavor: default config module, config function, and the python module torchrun runs.
#: torchtitan-npu's entry (``torchtitan_npu/entry.py``) applies its NPU patches
#: before torchtitan's trainer; its ``scripts/run_train.sh`` runs it as ``TRAIN_FILE``.
FLAVOR_DEFAULTS: dict[str, dict[str, str]] = {
    "torchtitan": {
        "module": AFBENCH_TITAN_MODULE,
        "config": "qwen3_from_hf",
        "entry": "torchtitan.train",
    },
    "torchtitan_npu": {
        "module": "torchtitan_npu.models.qwen3",
        "config": "sft_qwen3_1_7b_wordle",
        "entry": "torchtitan_npu.entry",
    },
}


class TorchtitanEngine(Section):
    """Run each variant with torchtitan (CUDA) or torchtitan-npu (Ascend) instead of afbench's
    builtin loop. ``module`` / ``config`` left out (or null) take the flavor's defaults:
    afbench's ``afbench.engines.torchtitan.qwen3`` / ``qwen3_from_hf`` (the model of
    ``model.path``, the data of ``data.path``), or ``torchtitan_npu.models.qwen3`` /
    ``sft_qwen3_1_7b_wordle`` (the reference's)."""

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
    workdir: LocalPath | None = None
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


EngineConfig = Annotated[
    Union[BuiltinEngine, CommandEngine, TorchtitanEngine], Field(discriminator="name")
]
