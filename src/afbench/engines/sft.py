"""The builtin SFT loop: AdamW, fixed seed, gradient clipping, assistant-only loss.

Per step it records wall-clock seconds (device-synchronised, the whole optimizer step),
loss, grad norm and tokens/s into ``metrics.jsonl`` and prints the reference's log line.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import torch

from afbench.analysis.steplog import non_finite_loss, step_line
from afbench.backends.base import Backend
from afbench.config.models import SftScheduler
from afbench.engines import data as chat
from afbench.engines import distributed as ddp
from afbench.engines import efficiency
from afbench.engines.common import environment_info, prepare_model
from afbench.engines.metrics import MetricsWriter
from afbench.errors import ConfigError, RunFailed
from afbench.runspec import RunSpec
from afbench.store.names import METRICS
from afbench.store.result import RunResult
from afbench.switches.base import SwitchContext
from afbench.switches.registry import apply_stage, ready_switches
from afbench.switches.step_profiler import NoProfiler


def dynamo_unique_graphs() -> int:
    """Graphs torch._dynamo has compiled in this process so far (cumulative; 0 in eager runs).

    Source: ``torch._dynamo.utils.counters["stats"]["unique_graphs"]``; a rise during a
    measured step is a recompile there (see :mod:`afbench.analysis.recompiles`). A process
    that never imported torch._dynamo compiled nothing: 0, without importing it (~1 s).
    """
    utils = sys.modules.get("torch._dynamo.utils")
    return int(utils.counters["stats"]["unique_graphs"]) if utils is not None else 0


def fused_adamw_available(device: torch.device) -> str:
    """Why ``torch.optim.AdamW(fused=True)`` cannot run on ``device`` ('' when it can).

    The proof is one call of the fused kernel (``torch._fused_adamw_``, what AdamW's fused
    path calls) on one-element tensors: torch lists a device as fused-capable before its
    extension implements the kernel (torch_npu: ``aclnnApplyAdamWV2`` in recent releases only).
    """
    try:
        p, g, m, v = (torch.zeros(1, device=device) for _ in range(4))
        step = torch.zeros((), device=device)
        torch._fused_adamw_(
            [p],
            [g],
            [m],
            [v],
            [],
            [step],
            lr=1e-3,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
        )
    except (RuntimeError, NotImplementedError, AttributeError, TypeError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return ""


def make_adamw(
    params: list, s: SftScheduler, device: torch.device
) -> tuple[torch.optim.AdamW, dict[str, str]]:
    """AdamW with ``s.optimizer_impl`` (fused, foreach or for_loop); returns the optimizer and
    ``{"impl": what runs, "requested": s.optimizer_impl, "reason": why they differ}`` for
    result.json. fused without the device's kernel runs foreach, with the reason.

    The three compute the same update (torch/optim/adamw.py); fused and foreach differ from
    for_loop only in float rounding (~1e-7 relative per step in fp32)."""
    impl, reason = s.optimizer_impl, ""
    if impl == "fused":
        why = fused_adamw_available(device)
        if why:
            impl, reason = "foreach", f"fused AdamW unavailable on {device.type}: {why}"
    kwargs = {
        "fused": {"fused": True},
        "foreach": {"foreach": True},
        "for_loop": {"foreach": False},
    }[impl]
    opt = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay, **kwargs)
    return opt, {"impl": impl, "requested": s.optimizer_impl, "reason": reason}


def run_sft(spec: RunSpec, backend: Backend, run_dir: Path) -> RunResult:
    """Run the SFT workload of ``spec``; returns the result record (written to result.json).

    Raises RunFailed on a non-finite loss, ConfigError on bad model/data, RunSkipped when a
    switch cannot be honoured on this backend.
    """
    cfg = spec.config
    s = cfg.scheduler
    assert isinstance(s, SftScheduler)
    info = ddp.dist_info()
    ddp.init(backend.name, info)
    ctx = SwitchContext(cfg, backend, run_dir, rank=info.rank)
    ready_switches(ctx)
    tokenizer, switches = prepare_model(
        ctx, train=True, wrap=lambda m: ddp.wrap(m, info, backend.device())
    )
    model, forward = ctx.model, ctx.forward
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos and s.seq_len > max_pos:
        raise ConfigError(
            f"scheduler.seq_len {s.seq_len} exceeds the model's max_position_embeddings {max_pos}"
        )

    convs = chat.load_conversations(cfg.data.path, cfg.data.max_samples)
    markers = chat.assistant_markers(tokenizer)
    samples = [chat.tokenize_conversation(tokenizer, c, markers) for c in convs]
    if cfg.data.packing:
        inputs, labels = chat.pack(samples, s.seq_len)
    else:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        inputs, labels = chat.pad_each(samples, s.seq_len, pad)
    order = chat.BatchOrder(inputs.shape[0], s.seed)
    device = backend.device()

    optimizer, optimizer_info = make_adamw(list(model.parameters()), s, device)
    accum = s.global_batch_size // (s.micro_batch_size * info.world_size)
    tokens_per_step = s.global_batch_size * s.seq_len

    metrics = MetricsWriter(
        run_dir / (METRICS if info.rank == 0 else f"metrics.rank{info.rank}.jsonl")
    )
    switches += apply_stage("steps", ctx)
    profiler = ctx.profiler or NoProfiler()
    first_step_s = None
    local_losses: list[float] = []
    forward_ddp = forward if not hasattr(forward, "_orig_mod") else forward._orig_mod
    window = efficiency.MeasuredWindow(backend, s.measure, metrics, info)
    with profiler, contextlib.closing(metrics):
        for step in range(1, s.steps + 1):
            window.before_step(step)
            backend.synchronize()
            t0 = time.perf_counter()
            local = None
            # every rank draws the same global batch and trains on its own shard of it
            shard = order.take(s.global_batch_size)[info.rank :: info.world_size]
            for k in range(accum):
                idx = shard[k * s.micro_batch_size : (k + 1) * s.micro_batch_size]
                x = inputs[idx].to(device, non_blocking=True)
                y = labels[idx].to(device, non_blocking=True)
                # DDP all-reduces gradients on the last micro batch only
                sync = (
                    contextlib.nullcontext()
                    if k == accum - 1 or not info.enabled
                    else forward_ddp.no_sync()
                )
                with sync:
                    # use_cache=False: a training forward has no use for the KV cache HF
                    # models build by default (config.use_cache), and Trainer turns it off too
                    loss = forward(input_ids=x, labels=y, use_cache=False).loss / accum
                    loss.backward()
                # the first micro batch starts the sum: 0 + x == x, without a zeros tensor
                local = loss.detach() if local is None else local + loss.detach()
            loss_sum = ddp.mean_across_ranks(local, info)
            if s.max_grad_norm is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            else:
                grad_norm = torch.linalg.vector_norm(
                    torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])
                )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            backend.synchronize()
            dt = time.perf_counter() - t0
            # one device-to-host copy for the three numbers of the log line, after the timed
            # region (three float() calls were three syncs, one of them inside the step)
            local_v, loss_v, gn = torch.stack(
                [local.float(), loss_sum.float(), grad_norm.float()]
            ).tolist()
            local_losses.append(local_v)
            if first_step_s is None:
                first_step_s = dt
            tps = tokens_per_step / dt
            window.after_step(step, dt)
            metrics.write(
                "step",
                step=step,
                step_time_s=dt,
                loss=loss_v,
                grad_norm=gn,
                tokens=tokens_per_step,
                tokens_per_s=tps,
                lr=s.lr,
                dynamo_unique_graphs=dynamo_unique_graphs(),
            )
            # rank 0 writes the step log the verdict is parsed from; other ranks their own log
            print(
                step_line(
                    step,
                    loss_v,
                    dt,
                    grad_norm=gn,
                    tokens_per_s=round(tps, 1),
                    **({"local_loss": local_losses[-1]} if info.enabled else {}),
                ),
                flush=True,
            )
            bad_loss = non_finite_loss(loss_v, step)
            if bad_loss:
                raise RunFailed(bad_loss)
            profiler.step()
    memory = window.result_fields()
    agreed = ddp.agreement(model, info, local_losses)
    ddp.shutdown(info)
    return RunResult.from_fields(
        {
            "workload": "sft",
            "world_size": info.world_size,
            "ranks": agreed,
            **environment_info(backend),
            "params": sum(p.numel() for p in model.parameters()),
            "tokens_per_step": tokens_per_step,
            "grad_accum_steps": accum,
            "num_blocks": int(inputs.shape[0]),
            "first_step_s": first_step_s,
            "optimizer": {"name": "AdamW", **optimizer_info},
            **memory,
            **efficiency.training_efficiency(
                model.config.to_dict(),
                s.seq_len,
                tokens_per_step * window.steps,
                window.seconds,
                info.world_size,
                peak_tflops=cfg.backend.peak_tflops,
                device_name=backend.device_name(),
                dtype=cfg.model.dtype,
            ),
            "switches": [vars(sw) for sw in switches],
        }
    )
