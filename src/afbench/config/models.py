"""Typed models of the composed Hydra config.

Every section forbids unknown keys, so a typo in YAML or on the command line is an error that
names the dotted key (see :func:`afbench.config.validate.validate_config`). The models hold no
behaviour beyond validation; components read them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from afbench.config.base import NAME_PATTERN, LocalPath, Section, env_vars
from afbench.config.engines import BuiltinEngine, EngineConfig
from afbench.config.secrets import mask_text
from afbench.config.short import SHORT_MIN_STEPS
from afbench.config.switch_names import switch_names
from afbench.config.verdict import VerdictConfig

#: how a window past the run's end is worded (afbench.config.validate adds the advice that
#: fits where the steps were set: command line, recipe phase)
PAST_LAST_STEP = "is after the last step"


class ModelConfig(Section):
    """An HF-format model folder (``config.json``, ``*.safetensors``, tokenizer files)."""

    name: str
    path: LocalPath = Field(description="Folder with config.json, *.safetensors, tokenizer.json")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    manifest: LocalPath | None = Field(
        None, description="sha256sum-format manifest checked before runs"
    )


#: the column sets a chat parquet file may have (docs/reference.md §6, willcb/V3-wordle): read
#: by the builtin engine (afbench.engines.data), checked by preflight
CHAT_COLUMNS = (("messages",), ("prompt", "completion"))


class DataConfig(Section):
    """A chat parquet file: rows with ``messages`` or ``prompt`` + ``completion`` lists."""

    name: str
    path: LocalPath
    packing: bool = True
    max_samples: PositiveInt | None = None
    # Inference: prompts come from the first user turn of each conversation, or from this
    # JSONL file of {"prompt": ...} / {"messages": [...]} rows.
    prompts_file: LocalPath | None = None


class ParallelConfig(Section):
    # every rank of the run, over all its nodes
    world_size: PositiveInt = 1
    tp_size: PositiveInt = 1
    # one node's device ids (each node runs world_size / nnodes ranks on the same ids)
    devices: list[NonNegativeInt] | None = None
    # Nodes of one run (afbench.engines.rendezvous): > 1 starts one torchrun agent per node
    # with srun over the SLURM allocation, all joining one rendezvous.
    nnodes: PositiveInt = 1
    rdzv_backend: str = "c10d"
    # host:port of the rendezvous (null: this host, a free port); its id (null: the run's)
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None

    @property
    def per_node(self) -> int:
        """Ranks (processes, devices) on each node."""
        return self.world_size // self.nnodes

    @field_validator("devices")
    @classmethod
    def _distinct(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"device ids must be distinct, got {v}")
        return v

    @model_validator(mode="after")
    def _fits(self) -> "ParallelConfig":
        if self.world_size % self.nnodes:
            raise ValueError(
                f"world_size {self.world_size} over nnodes {self.nnodes}: give "
                "every node the same number of ranks (world_size a multiple of "
                "nnodes)"
            )
        if self.devices is not None and len(self.devices) != self.per_node:
            per = f" per node ({self.nnodes} nodes)" if self.nnodes > 1 else ""
            raise ValueError(
                f"{len(self.devices)} devices {self.devices} for world_size {self.world_size}"
                f"{per}: give one device id per process{per}"
            )
        return self


class StepWindow(Section):
    """1-based, inclusive range of steps."""

    first_step: PositiveInt
    last_step: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> "StepWindow":
        if self.last_step < self.first_step:
            raise ValueError(f"last_step {self.last_step} is before first_step {self.first_step}")
        return self

    @property
    def steps(self) -> list[int]:
        return list(range(self.first_step, self.last_step + 1))


class SftScheduler(Section):
    workload: Literal["sft"] = "sft"
    steps: PositiveInt = 10
    seq_len: PositiveInt = 256
    global_batch_size: PositiveInt = 4
    micro_batch_size: PositiveInt = 4
    lr: PositiveFloat = 1e-4
    weight_decay: NonNegativeFloat = 0.0
    max_grad_norm: PositiveFloat | None = 1.0
    #: AdamW implementation (torch.optim.AdamW ``fused=True`` / ``foreach=True`` / neither)
    optimizer_impl: Literal["fused", "foreach", "for_loop"] = "fused"
    seed: int = 42
    measure: StepWindow = StepWindow(first_step=6, last_step=10)

    @model_validator(mode="after")
    def _window_inside(self) -> "SftScheduler":
        if self.measure.last_step > self.steps:
            raise ValueError(
                f"measure.last_step {self.measure.last_step} {PAST_LAST_STEP} {self.steps}"
            )
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not a multiple of "
                f"micro_batch_size {self.micro_batch_size}"
            )
        return self


class InferScheduler(Section):
    workload: Literal["infer"] = "infer"
    max_new_tokens: PositiveInt = 64
    batch_size: PositiveInt = 1
    input_truncated_len: PositiveInt = 256
    enable_thinking: bool = False
    num_prompts: PositiveInt = 4
    warmup_runs: NonNegativeInt = 1
    measured_runs: PositiveInt = 3
    kv_cache: Literal["dynamic", "static"] = "dynamic"
    stop_at_eos: bool = True
    seed: int = 42

    @property
    def steps(self) -> int:
        """Generation runs in total (warmup + measured); each is one logged step."""
        return self.warmup_runs + self.measured_runs

    @property
    def measure(self) -> StepWindow:
        """The measured runs, as a step window (they follow the warmup runs)."""
        return StepWindow(first_step=self.warmup_runs + 1, last_step=self.steps)


Scheduler = Annotated[Union[SftScheduler, InferScheduler], Field(discriminator="workload")]


class CompileConfig(Section):
    backend: str = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: dict[str, Any] = {}


class ProfilerWindow(StepWindow):
    warmup_steps: NonNegativeInt = 1
    record_shapes: bool = False
    with_stack: bool = False

    @model_validator(mode="after")
    def _room_for_warmup(self) -> "ProfilerWindow":
        if self.first_step <= self.warmup_steps:
            raise ValueError(
                f"first_step {self.first_step} leaves no room for {self.warmup_steps} warmup "
                "step(s) before it: raise first_step or lower warmup_steps"
            )
        return self


class NpuProfilerConfig(Section):
    """torch_npu.profiler._ExperimentalConfig settings (names as in torch_npu: the members of
    its ProfilerLevel / AiCMetrics / ExportType, the same in 2.12.0rc1 and 2.14.0;
    bench/npu_api_conformance.py checks them against the wheels)."""

    profiler_level: Literal["Level0", "Level1", "Level2", "Level_none"] = "Level1"
    aic_metrics: Literal[
        "AiCoreNone",
        "PipeUtilization",
        "ArithmeticUtilization",
        "Memory",
        "MemoryL0",
        "MemoryUB",
        "ResourceConflictRatio",
        "L2Cache",
        "MemoryAccess",
    ] = "ArithmeticUtilization"
    export_type: Literal["Text", "Db"] = "Text"


class OptimizationConfig(Section):
    """The optimization switches and their settings.

    Every registered switch is a bool key ``<name>``, false unless given, accepted from
    :func:`afbench.config.switch_names.switch_names` (the registry hands them in; no field
    here) and read as ``cfg.optimization.<name>``. A key that is neither a switch nor a
    setting below is an ``extra_forbidden`` error naming it, as in every other section.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, bool] = Field(init=False)  # the switches: bools only

    compile: CompileConfig = CompileConfig()
    profiler_window: ProfilerWindow = ProfilerWindow(first_step=6, last_step=10)
    npu_profiler: NpuProfilerConfig = NpuProfilerConfig()
    npugraph_ex_options: dict[str, Any] = {}

    @classmethod
    def valid_keys(cls) -> list[str]:
        """Every key valid here: the registered switches, then the settings."""
        return [*switch_names(), *cls.model_fields]

    @model_validator(mode="wrap")
    @classmethod
    def _switches(cls, data: Any, handler: Any) -> "OptimizationConfig":
        # every registered switch gets its default; a key that is neither a switch nor a
        # setting is reported beside the settings' own errors, all in one ValidationError
        if not isinstance(data, dict):
            return handler(data)
        names = switch_names()
        unknown = [k for k in data if k not in names and k not in cls.model_fields]
        errors: list[Any] = [
            {"type": "extra_forbidden", "loc": (k,), "input": data[k]} for k in unknown
        ]
        try:
            model = handler(
                {
                    **dict.fromkeys(names, False),
                    **{k: v for k, v in data.items() if k not in unknown},
                }
            )
        except ValidationError as err:
            errors += err.errors(include_url=False)
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return model


class BackendConfig(Section):
    name: Literal["auto", "cpu", "cuda", "npu"] = "auto"
    num_threads: PositiveInt | None = None
    # NPU: CANN install whose set_env.sh is sourced for workers.
    cann_root: str | None = None
    # Dense peak TFLOPs of one device at the model's precision, the denominator of MFU; null:
    # the published BF16 peak when the device name is known (afbench.analysis.flops), else n/a.
    peak_tflops: PositiveFloat | None = None


class LauncherConfig(Section):
    name: Literal["local"] = "local"
    timeout_s: PositiveFloat = 1800.0
    kill_grace_s: NonNegativeFloat = 10.0
    # afbench's own reading of one finished run's log, when it ends and in the report
    # (afbench.analysis.reading); not part of timeout_s, which ends when the process does
    collect_timeout_s: PositiveFloat = 300.0
    env: dict[str, str] = {}
    # Devices shared out to sweep jobs that set no parallel.devices: job k takes block
    # k mod (len(pool) // world_size) (Hydra has no per-job device assignment).
    device_pool: list[NonNegativeInt] | None = None

    @field_validator("device_pool")
    @classmethod
    def _pool(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError(f"needs distinct device ids, got {v}")
        return v

    _env = field_validator("env", mode="before")(classmethod(lambda cls, v: env_vars(v)))


class ParityConfig(Section):
    """Tolerances for loss / logit parity, relative, per dtype."""

    rtol_float32: PositiveFloat = 1e-3
    rtol_bfloat16: PositiveFloat = 2e-2
    rtol_float16: PositiveFloat = 5e-3


class ReportConfig(Section):
    lang: Literal["en", "zh"] = "en"
    formats: list[Literal["md", "html"]] = ["md", "html"]
    template_dir: LocalPath | None = None
    top_n_kernels: PositiveInt = 15
    parity: ParityConfig = ParityConfig()
    # A variant whose peak memory rises more than this (percent of the baseline's) gets a
    # caveat beside its verdict.
    memory_warn_pct: float = Field(10.0, ge=0)

    @field_validator("template_dir")
    @classmethod
    def _template_dir(cls, v: str | None, info: ValidationInfo) -> str | None:
        # a stored experiment.json names its machine's folder, never used on a re-render
        stored = bool(info.context and info.context.get("stored"))
        if v is not None and not stored and not Path(v).is_dir():
            raise ValueError(
                f"{v} is not a folder; give a folder with report.md.j2 / report.html.j2"
            )
        return v

    # Sweeps: the combination every other is compared with, as its overrides
    # ("optimization.autofuse=false,optimization.add_rmsnorm=false"); null = all switches off.
    sweep_baseline: str | None = None

    @field_validator("sweep_baseline")
    @classmethod
    def _key_value_pairs(cls, v: str | None) -> str | None:
        bad = [item for item in (v or "").split(",") if "=" not in item or not item.split("=")[0]]
        if v is not None and bad:
            raise ValueError(
                f"expected key=value pairs, one per swept key, e.g. "
                f"'report.sweep_baseline=\"optimization.autofuse=false\"'; {bad[0]!r} has no "
                "'=value' (quote the whole value for Hydra: its '=' is part of the value)"
            )
        return v


class ExperimentConfig(Section):
    """What to compare: variants (dotted overrides) x phases (dotted overrides), and how the
    rounds are ordered and run (how many rounds, and how they decide: :class:`VerdictConfig`)."""

    name: str = Field("single", pattern=NAME_PATTERN)
    baseline: str = "baseline"
    variants: dict[str, dict[str, Any]] = {"baseline": {}}
    phases: dict[str, dict[str, Any]] = {"run": {}}
    skip_policy: Literal["reference", "per_variant"] = "per_variant"
    # Phase whose step times give the verdict (null = the first phase without the profiler).
    verdict_phase: str | None = None
    # Order of the variants within a round: counterbalanced (r1: base, v1, v2; r2: v2, v1,
    # base; ...), interleaved (base, v1, v2 every round) or random (seeded; r1 starts with the
    # baseline). order_seed: the seed of random (null: one is drawn and recorded in plan.json).
    order: Literal["counterbalanced", "interleaved", "random"] = "counterbalanced"
    order_seed: int | None = None
    # In a sweep (-m), where the baseline combination's runs come from. beside: every job
    # that is not the baseline combination also runs the baseline combination, as a variant
    # named sweep_baseline in counterbalanced rounds beside its own, and is judged against
    # those runs (rounds adjacent in time; twice the runs). separate: every job runs only its
    # own combination and is judged against the baseline job's runs (minutes apart; a loaded
    # baseline job is caught only by its measured contention). docs/statistics.md §8.
    sweep_pairing: Literal["beside", "separate"] = "beside"
    # A verdict-phase run whose measured window was contended (the machine was shared:
    # afbench.analysis.contention.judge) is run again, at most this many times per run, in a
    # new run directory (<run_id>-rerun<k>); the contended one is kept and marked. 0: never.
    rerun_contended: Annotated[int, Field(ge=0, le=5)] = 1
    # Before a verdict-phase run (and its rerun) starts, wait at most this many seconds for a
    # quiet machine (afbench.launch.quiet; bench/README.md "Waiting for quiet"); 0: never
    # wait. Default $AFBENCH_WAIT_FOR_QUIET_S, else 120.
    wait_for_quiet_s: NonNegativeFloat = Field(
        default_factory=lambda: float(os.environ.get("AFBENCH_WAIT_FOR_QUIET_S", 120))
    )
    # A short (or longer) run of any recipe: every phase runs this many steps, with the measured
    # and profiler windows moved to its end (afbench.config.short.short_run); null: as written.
    steps: int | None = None

    @field_validator("steps")
    @classmethod
    def _short_enough(cls, v: int | None) -> int | None:
        if v is not None and v < SHORT_MIN_STEPS:
            raise ValueError(
                f"a run needs at least {SHORT_MIN_STEPS} steps: 1 warm-up step "
                f"(compilation) and the 4 measured steps a verdict needs; write "
                f"experiment.steps={SHORT_MIN_STEPS} or more"
            )
        return v

    @field_validator("variants", "phases")
    @classmethod
    def _names(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not v:
            raise ValueError("needs at least one entry")
        for name, overrides in v.items():
            if not re.fullmatch(NAME_PATTERN, name):  # "$" alone lets "name\n" through
                raise ValueError(
                    f"name {name!r} must be letters, digits, '_', '.', '-' (no '/' or '..')"
                )
            if ".." in name:
                raise ValueError(f"name {name!r} must not contain '..'")
            if overrides is not None and not isinstance(overrides, dict):
                raise ValueError(f"{name}: expected a mapping of dotted keys, got {overrides!r}")
        return {k: dict(o or {}) for k, o in v.items()}

    @model_validator(mode="after")
    def _baseline_known(self) -> "ExperimentConfig":
        if self.baseline not in self.variants:
            raise ValueError(
                f"baseline {self.baseline!r} is not one of the variants {sorted(self.variants)}"
            )
        if self.verdict_phase is not None and self.verdict_phase not in self.phases:
            raise ValueError(
                f"verdict_phase {self.verdict_phase!r} is not one of the phases {list(self.phases)}"
            )
        return self


class RunConfig(Section):
    """Everything one worker process needs to run one variant in one phase."""

    model: ModelConfig
    data: DataConfig
    parallel: ParallelConfig = ParallelConfig()
    scheduler: Scheduler
    optimization: OptimizationConfig = Field(default_factory=OptimizationConfig)
    backend: BackendConfig = BackendConfig()
    engine: EngineConfig = BuiltinEngine()
    # Settings one engine cannot honour are that engine's check (afbench.engines.registry);
    # a switch's (its workloads, its window) are the switch's (afbench.switches.registry);
    # both run for every variant and phase at plan time.


class PreflightConfig(Section):
    """Thresholds of the checks run before any experiment (afbench.preflight)."""

    min_free_gib: NonNegativeFloat = 1.0
    # CANN component build dates (20YYMMDD) must be on or after this (NPU only).
    min_cann_date: str = Field("20260715", pattern=r"^20\d{6}$")


class HistoryConfig(Section):
    """Where finished experiments are recorded (afbench.history). url: any SQLAlchemy URL;
    null: $AFBENCH_HISTORY_URL, else the per-user SQLite file
    (platformdirs user_data_dir("afbench")/history.sqlite). record: false records nothing."""

    url: str | None = None
    record: bool = True

    @field_serializer("url")
    def _hide_password(self, url: str | None) -> str | None:
        # experiment.json keeps the config: never a database password in it
        return mask_text(url) if url else url


class AfbenchConfig(RunConfig):
    """The whole composed config (Hydra's ``hydra`` node excluded)."""

    launcher: LauncherConfig = LauncherConfig()
    preflight: PreflightConfig = PreflightConfig()
    # An earlier output directory (single or sweep): runs whose config hash has an OK result
    # there are copied instead of run again; failed or missing ones run.
    resume: str | None = None
    report: ReportConfig = ReportConfig()
    experiment: ExperimentConfig = ExperimentConfig()
    verdict: VerdictConfig = VerdictConfig()
    history: HistoryConfig = HistoryConfig()
    task: Literal["run", "check"] = "run"
    verbose: bool = False
