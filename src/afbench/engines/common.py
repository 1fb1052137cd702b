"""Shared pieces of the builtin engine: model loading, metrics records, environment info."""

from __future__ import annotations

import math
import platform
import random
import sys
from pathlib import Path
from typing import Any

import torch

from afbench.backends.base import Backend
from afbench.config.models import ModelConfig
from afbench.errors import ConfigError
from afbench.switches.base import SwitchContext
from afbench.switches.registry import apply_stage

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np  # optional in the worker: seeded only when installed

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional for the worker
        pass


def load_model_and_tokenizer(cfg: ModelConfig, backend: Backend) -> tuple[Any, Any]:
    """Load an HF-format folder with transformers (offline). Raises ConfigError naming model.path."""
    # transformers: ~2 s, paid when a model loads
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(cfg.path)
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"model.path: no config.json in {path}; point model.path at an HF-format folder"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=DTYPES[cfg.dtype],
        attn_implementation=cfg.attn_implementation,
        local_files_only=True,
    )
    return model.to(backend.device()), tokenizer


def prepare_model(ctx: SwitchContext, train: bool, wrap: Any = None) -> tuple[Any, list]:
    """Seed, load, apply the switches of stage ``model`` (add_rmsnorm, rmsnorm), ``wrap``
    (e.g. DDP) and the switches of stage ``forward`` (autofuse), in that order
    (:mod:`afbench.switches.registry`).

    Sets ``ctx.model`` (the optimizer must use its parameters) and ``ctx.forward`` (the
    wrapped, compiled module to call). Returns (tokenizer, switch reports).
    """

    cfg = ctx.cfg
    seed_everything(cfg.scheduler.seed)
    ctx.model, tokenizer = load_model_and_tokenizer(cfg.model, ctx.backend)
    ctx.model.train(train)
    switches = apply_stage("model", ctx)
    ctx.forward = wrap(ctx.model) if wrap else ctx.model
    switches += apply_stage("forward", ctx)
    return tokenizer, switches


def finite(x: float) -> bool:
    return not (math.isnan(x) or math.isinf(x))


def environment_info(backend: Backend) -> dict[str, Any]:
    import transformers  # transformers: ~2 s, paid when a model loads

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "backend": backend.name,
        "device": backend.describe(),
        "torch_threads": torch.get_num_threads(),
        "versions": {**backend.versions(), "transformers": transformers.__version__},
    }
