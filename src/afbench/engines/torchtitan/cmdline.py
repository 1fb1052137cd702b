"""torchtitan's command line for one run: torchrun options, trainer flags, environment.

Pure (no process is started, torch is not imported): testable on a CPU-only machine. Flag
names and their order follow torchtitan 0.3.0 and torchtitan-npu; see
:mod:`afbench.engines.torchtitan` for the formats.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from afbench.backends.resolve import VISIBLE_DEVICES_ENV, resolve_backend
from afbench.config.engines import AFBENCH_TITAN_MODULE, TorchtitanEngine
from afbench.config.models import RunConfig
from afbench.engines.rendezvous import node_launch, torchrun_args
from afbench.engines.torchtitan.hf_model import qwen3_dims
from afbench.errors import ConfigError
from afbench.switches.registry import titan_switch_args

#: The environment by which afbench's config function (:mod:`afbench.engines.torchtitan.qwen3`,
#: called by torchtitan with no arguments) learns the run's model folder and data file.
MODEL_ENV = "AFBENCH_MODEL_PATH"
DATA_ENV = "AFBENCH_DATA_PATH"

#: The module torchrun runs for a run of ``engine.flavor=torchtitan`` whose backend is cpu
#: (``engine.entry`` unset): torchtitan's trainer with afbench's named CPU patches
#: (:mod:`afbench.engines.torchtitan.cpu_entry`).
CPU_ENTRY = "afbench.engines.torchtitan.cpu_entry"
#: What such a run is, in its result's ``device`` and so in the report and summary: never a GPU
#: or NPU run.
CPU_LABEL = "torchtitan on CPU: SDPA attention, inductor C++"

#: The reference's data options (docs/reference.md §1): torchtitan-npu's chat dataloader over one
#: parquet file. ``{data_path}`` is replaced by ``data.path``.
NPU_CHAT_PARQUET_ARGS = (
    "dataloader:chat-data-loader-config",
    "--dataloader.dataset-path",
    "parquet",
    "--dataloader.data-files",
    "{data_path}",
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

#: Settings of the afbench config that the command line does not carry: torchtitan takes them
#: from the config function (``--config``). Listed in the run's result.
NOT_TRANSLATED = (
    "scheduler.lr",
    "scheduler.weight_decay",
    "scheduler.max_grad_norm",
    "model.dtype",
    "model.attn_implementation",
    "data.packing",
    "data.max_samples",
    "optimization.compile.mode",
    "optimization.compile.fullgraph",
    "optimization.compile.dynamic",
    "optimization.compile.options",
    "optimization.profiler_window.record_shapes",
    "optimization.profiler_window.with_stack",
    "optimization.npu_profiler",
)


def check_config(cfg: RunConfig, engine: TorchtitanEngine) -> None:
    """What torchtitan cannot run, known from the config alone (plan time, and again before
    the command line is built). The switches' own checks (e.g. torchtitan-npu's profiler
    window) are in their ``titan_args`` (:mod:`afbench.switches.registry`).

    Raises:
        ConfigError: ``scheduler.workload`` is not sft (``model.path`` is absolute already,
            as torchtitan's ``checkpoint.initial_load_path`` must be:
            :data:`afbench.config.base.LocalPath`); under afbench's config function
            (``engine.module`` = ``afbench.engines.torchtitan.qwen3``), a ``model.path`` whose
            config.json torchtitan's Qwen3 cannot build
            (:func:`afbench.engines.torchtitan.hf_model.qwen3_dims`; a folder without
            config.json is left to preflight).
    """
    if cfg.scheduler.workload != "sft":
        raise ConfigError(
            f"scheduler.workload: engine=torchtitan runs SFT only, got "
            f"{cfg.scheduler.workload!r}; use scheduler=sft, or engine=builtin for inference"
        )
    if engine.module == AFBENCH_TITAN_MODULE and (Path(cfg.model.path) / "config.json").exists():
        qwen3_dims(cfg.model.path)


def entry_module(engine: TorchtitanEngine, backend: str) -> str:
    """The python module torchrun runs: ``engine.entry`` when set, :data:`CPU_ENTRY` for
    flavor torchtitan on backend cpu, else the flavor's entry (``torchtitan.train``)."""
    if engine.entry is None and backend == "cpu" and engine.flavor == "torchtitan":
        return CPU_ENTRY
    return engine.entry_module


def trainer_args(spec: Any, engine: TorchtitanEngine) -> list[str]:
    """torchtitan options for ``spec`` (no launcher, no ``--module/--config``), in order:
    model and checkpoint, training, seed, compile, profiler, dump folder and metrics,
    ``extra_args``, then the data options (a tyro subcommand must come last).

    The switches' options (compile, profiler) come from each registered switch's
    ``titan_args`` (:func:`afbench.switches.registry.titan_switch_args`).

    Raises:
        ConfigError: see :func:`check_config`; a profiler window the flavor cannot record.
        RunSkipped: a switch torchtitan cannot honour from the command line
            (``add_rmsnorm``, ``rmsnorm``, ``npugraph_ex``).
    """
    cfg = spec.config
    s = cfg.scheduler
    check_config(cfg, engine)
    switch_args = titan_switch_args(cfg, engine.flavor, Path(spec.run_dir))
    args: list[str] = []
    if engine.hf_assets:
        args += ["--hf_assets_path", cfg.model.path]
    if engine.hf_assets:
        # torchtitan loads nothing unless checkpointing is enabled.
        args += ["--checkpoint.enable"]
    # load_only: a benchmark run never writes checkpoints (the reference's setting).
    args += ["--checkpoint.load_only"]
    if engine.hf_assets:
        args += [
            "--checkpoint.initial_load_path",
            cfg.model.path,
            "--checkpoint.initial_load_in_hf",
        ]
    args += [
        "--training.steps",
        str(s.steps),
        "--training.seq_len",
        str(s.seq_len),
        "--training.global_batch_size",
        str(s.global_batch_size),
        "--training.local_batch_size",
        str(s.micro_batch_size),
        "--debug.seed",
        str(s.seed),
    ]
    args += switch_args
    args += [
        "--dump_folder",
        str(Path(spec.run_dir) / engine.dump_folder_name),
        "--metrics.log_freq",
        "1",
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

    ``<entry>``: :func:`entry_module` (afbench's CPU entry on backend cpu).
    With ``parallel.nnodes`` > 1: ``srun ... <python> -m torch.distributed.run --nnodes=N
    --nproc_per_node=<world_size/N> --rdzv_backend=... --rdzv_endpoint=... --rdzv_id=...``
    (:mod:`afbench.engines.rendezvous`), the rest the same.

    ``python -m torch.distributed.run`` is torchrun (torch's ``torchrun`` console script runs
    ``torch.distributed.run:main``) on the interpreter given, which is the one checked for
    torchtitan. The torchrun options are those of the flavors' ``run_train.sh``: port 0 picks a
    free port; only local rank 0 is echoed, prefixed ``[rank0]:``; every rank's output is kept
    under ``--log-dir``. Script (``engine.train_script`` set): ``bash <script> <trainer args>``,
    with NGPU / MODULE / CONFIG / LOG_RANK (and TRAIN_FILE for a non-default entry) in the
    environment, as the reference runs ``scripts/run_train.sh``.

    Environment: ``AFBENCH_MODEL_PATH`` / ``AFBENCH_DATA_PATH`` (``model.path``, ``data.path``:
    what afbench's config function reads); ``ASCEND_RT_VISIBLE_DEVICES`` (npu) or
    ``CUDA_VISIBLE_DEVICES`` (cuda) from ``parallel.devices`` (left alone when null: ranks use
    devices 0..world_size-1); direct runs also get what the flavor's run_train.sh exports
    (:data:`LAUNCH_ENV`).

    Args:
        spec: the RunSpec; ``spec.config.engine`` is not read (``engine`` is).
        engine: the torchtitan engine settings.
        python: interpreter for torchrun (direct runs).
        backend: the resolved backend name; default the plan's ``spec.backend``, else
            ``spec.config.backend.name`` resolved by
            :func:`afbench.backends.resolve.resolve_backend`.

    Raises:
        ConfigError, RunSkipped: see :func:`trainer_args`.
    """
    cfg = spec.config
    world_size = cfg.parallel.world_size
    backend = backend or getattr(spec, "backend", None) or resolve_backend(cfg.backend.name)
    flags = trainer_args(spec, engine)
    entry = entry_module(engine, backend)
    env: dict[str, str] = {MODEL_ENV: cfg.model.path, DATA_ENV: cfg.data.path}
    devices = cfg.parallel.devices
    # Under afbench's launcher the worker already holds its assigned devices as a visibility
    # mask (afbench.launch.devices); only a bare call sets it from parallel.devices.
    if (
        devices is not None
        and backend in VISIBLE_DEVICES_ENV
        and VISIBLE_DEVICES_ENV[backend] not in os.environ
    ):
        env[VISIBLE_DEVICES_ENV[backend]] = ",".join(str(d) for d in devices)
    if engine.train_script:
        if cfg.parallel.nnodes > 1:
            raise ConfigError(
                "engine.train_script starts torchrun on one node; a run over "
                f"parallel.nnodes={cfg.parallel.nnodes} nodes needs the direct "
                "launch (engine.train_script=null)"
            )
        env.update(NGPU=str(world_size), MODULE=engine.module, CONFIG=engine.config, LOG_RANK="0")
        if engine.entry or entry != engine.entry_module:
            env["TRAIN_FILE"] = entry
        return ["bash", engine.train_script, *flags], env
    env.update(LAUNCH_ENV[engine.flavor])
    dump = Path(spec.run_dir) / engine.dump_folder_name
    # several nodes: srun starts one agent per node, all joining one rendezvous
    rendezvous = (
        torchrun_args(cfg.parallel, spec.run_id)
        if cfg.parallel.nnodes > 1
        else [
            f"--nproc_per_node={world_size}",
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint=localhost:0",
        ]
    )
    argv = [
        *node_launch(cfg.parallel),
        python,
        "-m",
        "torch.distributed.run",
        *rendezvous,
        "--local-ranks-filter",
        "0",
        "--role",
        "rank",
        "--tee",
        "3",
        "--log-dir",
        str(dump / "torchrun"),
        "-m",
        entry,
        "--module",
        engine.module,
        "--config",
        engine.config,
        *flags,
    ]
    return argv, env
