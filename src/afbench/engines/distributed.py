"""Data parallelism for the builtin engine: torchrun starts ``parallel.world_size`` workers;
each joins the process group (gloo on cpu, nccl on cuda, hccl on npu), the model is wrapped in
DistributedDataParallel, and every rank trains on its own shard of each global batch.

Rank 0 writes metrics.jsonl, the step log and result.json; other ranks log to
``rank<r>.log``. After the last step the ranks compare a checksum of their parameters and
their step losses, so the report can say whether they agreed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

PROCESS_GROUP_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def dist_info() -> DistInfo:
    """Rank, world size and local rank from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK)."""
    return DistInfo(
        int(os.environ.get("RANK", 0)),
        int(os.environ.get("WORLD_SIZE", 1)),
        int(os.environ.get("LOCAL_RANK", 0)),
    )


def init(backend_name: str, info: DistInfo) -> None:
    if info.enabled and not dist.is_initialized():
        dist.init_process_group(backend=PROCESS_GROUP_BACKEND[backend_name])


def wrap(model: torch.nn.Module, info: DistInfo, device: torch.device) -> torch.nn.Module:
    if not info.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel  # DDP: only for world_size > 1

    ids = [device.index] if device.type != "cpu" else None
    return DistributedDataParallel(model, device_ids=ids)


def mean_across_ranks(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Mean of a scalar over ranks (the global loss of a data-parallel step)."""
    if not info.enabled:
        return value
    out = value.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / info.world_size


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """``obj`` (picklable) of every rank, in rank order, on every rank; ``[obj]`` without
    torchrun. A collective: every rank must call it."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def agreement(model: torch.nn.Module, info: DistInfo, local_losses: list[float]) -> dict:
    """Whether every rank ended with identical parameters (float64 checksum of all of them) and
    the per-rank local losses of the last step, gathered on every rank."""
    if not info.enabled:
        return {}
    checksum = torch.tensor(
        [sum(float(p.detach().double().sum()) for p in model.parameters())], dtype=torch.float64
    )
    last = torch.tensor([local_losses[-1] if local_losses else float("nan")], dtype=torch.float64)
    sums = [torch.zeros_like(checksum) for _ in range(info.world_size)]
    losses = [torch.zeros_like(last) for _ in range(info.world_size)]
    dist.all_gather(sums, checksum)
    dist.all_gather(losses, last)
    values = [float(t) for t in sums]
    return {
        "world_size": info.world_size,
        "param_checksums": values,
        "params_identical": max(values) == min(values),
        "last_step_local_losses": [float(t) for t in losses],
    }


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
