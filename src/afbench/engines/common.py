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
from afbench.switches import SwitchReport
from afbench.switches.converters import apply_converters

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
        raise ConfigError(f"model.path: no config.json in {path}; point model.path at an HF-format folder")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation,
        local_files_only=True,
    )
    return model.to(backend.device()), tokenizer


def prepare_model(cfg: Any, backend: Backend, train: bool,
                  wrap: Any = None) -> tuple[Any, Any, Any, list]:
    """Seed, load, apply the converters (add_rmsnorm, rmsnorm), ``wrap`` (e.g. DDP) and the
    autofuse switch, in that order.

    Returns (model, forward, tokenizer, switch reports): ``forward`` is the (wrapped, compiled)
    module to call; the optimizer must use ``model``'s parameters.
    """

    seed_everything(cfg.scheduler.seed)
    model, tokenizer = load_model_and_tokenizer(cfg.model, backend)
    model.train(train)
    switches = apply_converters(model, cfg.optimization, backend)
    forward = wrap(model) if wrap else model
    if cfg.optimization.autofuse:
        forward, detail = backend.compile(forward, cfg.optimization.compile)
        switches.append(SwitchReport("autofuse", True, detail))
    return model, forward, tokenizer, switches


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
