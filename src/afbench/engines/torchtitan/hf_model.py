"""The model in ``model.path`` as torchtitan's Qwen3 sizes: read from the folder's HF
``config.json``, checked against what torchtitan 0.3.0's dense Qwen3 builder can build.

Pure (json only, no torch, no torchtitan): the planner calls :func:`qwen3_dims` so that a model
torchtitan cannot build fails at plan time (exit 2) naming ``model.path``; the config function
that the torchtitan process imports (:mod:`afbench.engines.torchtitan.qwen3`) builds the model
from the same dict, so plan time and run time agree on one reading of ``config.json``.

Source of the mapping: HF ``Qwen3Config`` field names (transformers ``models/qwen3``) and the
arguments of ``torchtitan.models.qwen3._build_qwen3_layers`` / ``Qwen3Model.Config``
(torchtitan 0.3.0), e.g. Qwen3-1.7B: ``hidden_size`` 2048 -> ``dim``, ``intermediate_size``
6144 -> ``hidden_dim``, ``tie_word_embeddings`` -> ``enable_weight_tying``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from afbench.errors import ConfigError

#: torchtitan 0.3.0's Qwen3 RMSNorm epsilon (``torchtitan.models.qwen3._EPS``), fixed in its
#: builder; every published Qwen3 config.json has this value.
TITAN_QWEN3_EPS = 1e-6

_REQUIRED = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


def _rope_theta(cfg: dict[str, Any]) -> float | None:
    """``rope_theta`` (transformers < 5) or ``rope_parameters.rope_theta`` (transformers 5)."""
    theta = cfg.get("rope_theta")
    params = cfg.get("rope_parameters") or {}
    return theta if theta is not None else params.get("rope_theta")


def qwen3_dims(model_path: str | Path) -> dict[str, Any]:
    """torchtitan's dense Qwen3 sizes for the HF model folder ``model_path``.

    Returns:
        ``{"dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_dim",
        "vocab_size", "max_seq_len", "rope_theta", "enable_weight_tying"}`` (ints, a float
        theta, a bool). ``head_dim`` defaults to ``hidden_size / num_attention_heads`` and
        ``num_key_value_heads`` to ``num_attention_heads``, as in HF's ``Qwen3Config``.

    Raises:
        ConfigError: naming ``model.path``: ``config.json`` missing or not JSON; a model type
            other than dense ``qwen3`` (MoE ``qwen3_moe`` and other families are not built by
            afbench's config function); a missing size; heads not a multiple of KV heads;
            attention bias, sliding window or RoPE scaling (torchtitan's Qwen3 has none); an
            RMSNorm epsilon other than torchtitan's 1e-6.
    """
    path = Path(model_path) / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model.path: {path} is not a readable config.json ({exc}); "
            "engine=torchtitan builds the model from it"
        ) from None
    where = f"model.path: {path}"
    arch = cfg.get("architectures") or []
    if cfg.get("model_type") != "qwen3" or (arch and "Qwen3ForCausalLM" not in arch):
        raise ConfigError(
            f"{where}: model_type {cfg.get('model_type')!r} / architectures {arch} is not a "
            "dense Qwen3 (Qwen3ForCausalLM); afbench's torchtitan config function builds only "
            "that: name your own with engine.module / engine.config"
        )
    missing = [k for k in _REQUIRED if not isinstance(cfg.get(k), int)]
    theta = _rope_theta(cfg)
    if not isinstance(theta, (int, float)):
        missing.append("rope_theta")
    if missing:
        raise ConfigError(
            f"{where}: no integer {', '.join(missing)}; torchtitan needs them to build the model"
        )
    n_heads = cfg["num_attention_heads"]
    n_kv_heads = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    problems = []
    if n_heads % n_kv_heads:
        problems.append(
            f"num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv_heads}"
        )
    if cfg.get("attention_bias"):
        problems.append("attention_bias is true")
    if cfg.get("use_sliding_window"):
        problems.append("use_sliding_window is true")
    scaling = cfg.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type") or (cfg.get("rope_parameters") or {}).get("rope_type")
    if rope_type not in (None, "default"):
        problems.append(f"RoPE scaling {rope_type!r}")
    eps = cfg.get("rms_norm_eps", TITAN_QWEN3_EPS)
    if eps != TITAN_QWEN3_EPS:
        problems.append(f"rms_norm_eps {eps} (torchtitan's Qwen3 uses {TITAN_QWEN3_EPS})")
    if problems:
        raise ConfigError(
            f"{where}: torchtitan's Qwen3 cannot build this model: " + "; ".join(problems)
        )
    return {
        "dim": cfg["hidden_size"],
        "n_layers": cfg["num_hidden_layers"],
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "head_dim": head_dim,
        "hidden_dim": cfg["intermediate_size"],
        "vocab_size": cfg["vocab_size"],
        "max_seq_len": cfg["max_position_embeddings"],
        "rope_theta": float(theta),
        "enable_weight_tying": bool(cfg.get("tie_word_embeddings", False)),
    }
