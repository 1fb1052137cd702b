"""Model arithmetic from an HF ``config.json`` dict: parameter counts, training FLOPs per token,
achieved TFLOPs and MFU, published device peaks, and the KV-cache size of inference.

Pure: no torch, no afbench package outside :mod:`afbench.analysis`. Every count is for the
dense decoder-only Qwen3 architecture (``Qwen3ForCausalLM`` in transformers): per layer
q/k/v/o projections with grouped-query attention, per-head RMSNorm on q and k (``q_norm``,
``k_norm``, weight of size head_dim), a gated MLP (gate, up, down) and two RMSNorms; then a
final RMSNorm and the output projection (``lm_head``), tied to the token embedding when
``tie_word_embeddings`` is true. Llama-style configs without q/k norms are not this
architecture: their count is off by 2 x head_dim per layer, which no report number can see.

The FLOP formula is PaLM's (Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with
Pathways", arXiv:2204.02311, Appendix B): training FLOPs per token = 6N + 12·L·H·Q·T, with
L layers, H query heads, Q head dimension, T sequence length; 6N covers the forward (2N) and
backward (4N) matmuls with the weights, 12·L·H·Q·T the two attention matmuls (scores and
value aggregation) over the full T x T square, causal masking not discounted. torchtitan
computes the same (``torchtitan/models/utils.py``, ``get_dense_model_nparams_and_flops``,
pytorch/torchtitan@b5bcd76: ``6 * nparams_for_matmul + 6 * n_layers * n_heads * head_dims *
seq_len`` with ``head_dims = 2 * head_dim`` for Qwen3, and ``nparams_for_matmul`` = all
parameters minus the ``nn.Embedding`` table, or all of them when the embedding is tied,
since the shared table still does the lm_head matmul). afbench takes torchtitan's N, named
:attr:`ParamCount.flops_params`: the token embedding is a lookup (no FLOPs) and is left out;
the lm_head matmul (hidden x vocab per token) is in, tied or not; norm weights are in too (as
in torchtitan; they are 0.01-0.1% of N). Recomputation (activation checkpointing) is not
counted, so this is *model* FLOPs, the numerator of MFU; an MFU above 100% means the peak or
the token count is wrong, never that the formula undercounts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from afbench.analysis import said

#: Keys of an HF config that the counts need (``head_dim`` may be absent: hidden / heads).
REQUIRED_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class ModelConfigError(ValueError):
    """An HF model config lacks a key the FLOP or KV-cache count needs, or has a bad value."""


@dataclass(frozen=True)
class TransformerShape:
    """The sizes of a Qwen3 decoder that the counts use (from config.json)."""

    layers: int  # L, num_hidden_layers
    hidden: int  # hidden_size
    heads: int  # H, num_attention_heads (query heads)
    kv_heads: int  # num_key_value_heads (= heads without GQA)
    head_dim: int  # Q, head_dim (hidden / heads when absent)
    intermediate: int  # intermediate_size of the gated MLP
    vocab: int  # vocab_size
    tied: bool  # tie_word_embeddings
    attention_bias: bool  # q/k/v/o projections carry biases (Qwen3: false)

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], where: str = "model config"
    ) -> "TransformerShape":
        """Read the shape from an HF ``config.json`` dict.

        Raises:
            ModelConfigError: a key of :data:`REQUIRED_KEYS` is missing or not a positive
                integer; the message names the key and ``where`` (e.g. the file).
        """
        missing = [k for k in REQUIRED_KEYS if k not in config]
        if missing:
            raise ModelConfigError(
                f"{where}: missing {', '.join(missing)}; FLOPs and KV-cache "
                "sizes need an HF decoder config.json"
            )
        heads = config["num_attention_heads"]
        values = {
            "layers": config["num_hidden_layers"],
            "hidden": config["hidden_size"],
            "heads": heads,
            "kv_heads": config.get("num_key_value_heads") or heads,
            "head_dim": config.get("head_dim")
            or (config["hidden_size"] // heads if isinstance(heads, int) and heads > 0 else heads),
            "intermediate": config["intermediate_size"],
            "vocab": config["vocab_size"],
        }
        for name, value in values.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ModelConfigError(f"{where}: {name} is {value!r}; expected a positive integer")
        return cls(
            **values,
            tied=bool(config.get("tie_word_embeddings", False)),
            attention_bias=bool(config.get("attention_bias", False)),
        )


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a Qwen3 decoder, counted from its config (exact, not estimated)."""

    embedding: int  # token embedding table, vocab x hidden
    per_layer: int  # one decoder layer: attention + q/k norms + MLP + two RMSNorms
    layers: int  # L x per_layer
    final_norm: int  # hidden
    lm_head: int  # output projection weights, hidden x vocab (the embedding table when tied)
    tied: bool

    @property
    def non_embedding(self) -> int:
        """Decoder layers + final norm: the embedding table and lm_head excluded (Kaplan et al.
        2020's N; Qwen's model cards give it as "Number of Parameters (Non-Embedding)")."""
        return self.layers + self.final_norm

    @property
    def total(self) -> int:
        """What ``sum(p.numel() for p in model.parameters())`` returns (a tied table once)."""
        return self.embedding + self.non_embedding + (0 if self.tied else self.lm_head)

    @property
    def flops_params(self) -> int:
        """N of 6N: every weight used in a matmul per token (non-embedding + lm_head), as
        torchtitan's ``nparams_for_matmul``."""
        return self.non_embedding + self.lm_head


def count_params(shape: TransformerShape) -> ParamCount:
    """Exact parameter count of a Qwen3 decoder of this shape (see the module docstring)."""
    h, q = shape.hidden, shape.head_dim
    q_out, kv_out = shape.heads * q, shape.kv_heads * q
    attention = h * q_out + 2 * h * kv_out + q_out * h  # q, k, v, o weights
    if shape.attention_bias:
        attention += q_out + 2 * kv_out + h
    qk_norms = 2 * q
    mlp = 3 * h * shape.intermediate  # gate, up (hidden -> intermediate), down (back)
    norms = 2 * h  # input_layernorm, post_attention_layernorm
    per_layer = attention + qk_norms + mlp + norms
    table = shape.vocab * h
    return ParamCount(
        embedding=table,
        per_layer=per_layer,
        layers=shape.layers * per_layer,
        final_norm=h,
        lm_head=table,
        tied=shape.tied,
    )


def training_flops_per_token(shape: TransformerShape, seq_len: int) -> int:
    """Model FLOPs of one trained token: 6N + 12·L·H·Q·T (PaLM App. B; torchtitan).

    Args:
        seq_len: T, tokens per sequence (``scheduler.seq_len``).

    Returns:
        FLOPs per token (forward + backward), N = :attr:`ParamCount.flops_params`.
    """
    n = count_params(shape).flops_params
    return 6 * n + 12 * shape.layers * shape.heads * shape.head_dim * seq_len


def achieved_tflops(tokens_per_s_per_device: float, flops_per_token: float) -> float:
    """TFLOPs per device (1e12 FLOP/s): tokens/s of one device x FLOPs per token / 1e12."""
    return tokens_per_s_per_device * flops_per_token / 1e12


def mfu_pct(tflops_per_device: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation in percent: achieved / peak x 100 (both TFLOPs per device)."""
    return 100.0 * tflops_per_device / peak_tflops


#: Published dense (no 2:4 sparsity) BF16 tensor peaks, TFLOPs per device, matched against
#: the device name the backend reports (``torch.cuda.get_device_name``). First match wins, so
#: the NVL / PCIe forms come before the plain name. Vendors print the sparse figure first;
#: the dense one is half of it. Ascend NPUs are not here: Huawei publishes no per-chip BF16
#: figure for the 910B family on a product page that could be cited (the ~313 TFLOPs that
#: circulates for 910B3 is second-hand); set ``backend.peak_tflops`` for them.
PUBLISHED_PEAK_BF16_TFLOPS: tuple[tuple[str, float, str], ...] = (
    (
        r"H200\s*NVL",
        835.0,
        "NVIDIA H200 NVL, 1,671 sparse / 835 dense, nvidia.com/en-us/data-center/h200/",
    ),
    (
        r"H200",
        989.0,
        "NVIDIA H200 SXM, 1,979 sparse / 989 dense, nvidia.com/en-us/data-center/h200/",
    ),
    (
        r"H100\s*NVL",
        835.0,
        "NVIDIA H100 NVL, 1,671 sparse / 835 dense, nvidia.com/en-us/data-center/h100/",
    ),
    (
        r"H100\s*PCIe",
        756.0,
        "NVIDIA H100 PCIe, 1,513 sparse / 756 dense, nvidia.com/en-us/data-center/h100/",
    ),
    (
        r"H100",
        989.0,
        "NVIDIA H100 SXM, 1,979 sparse / 989 dense, nvidia.com/en-us/data-center/h100/",
    ),
    (r"A100", 312.0, "NVIDIA A100, 624 sparse / 312 dense, nvidia.com/en-us/data-center/a100/"),
)

#: Model dtypes that the BF16 peaks above are a fair denominator for.
HALF_DTYPES = ("bfloat16", "float16")


def published_peak_tflops(device_name: str) -> tuple[float, str] | None:
    """(dense BF16 peak TFLOPs, its source) for a device name, or None when not recognised."""
    for pattern, tflops, source in PUBLISHED_PEAK_BF16_TFLOPS:
        if re.search(pattern, device_name, re.I):
            return tflops, source
    return None


def resolve_peak_tflops(
    configured: float | None, device_name: str, dtype: str
) -> tuple[float | None, str]:
    """The MFU denominator and where it came from.

    ``backend.peak_tflops`` (``configured``) wins; otherwise the published BF16 peak of a
    recognised device, only for a bf16/fp16 model (a float32 run measured against a BF16 peak
    would understate MFU by the precision gap, not the implementation's).

    Returns:
        (peak TFLOPs per device or None, its source or the reason there is none as a catalog
        sentence, :func:`afbench.analysis.said`: ``peak_configured``, ``as_written`` (the
        published figure's citation), ``peak_unknown_device``, ``peak_other_dtype``).
    """
    if configured is not None:
        return float(configured), said("peak_configured")
    found = published_peak_tflops(device_name)
    if found is None:
        return None, said("peak_unknown_device", device=repr(device_name))
    if dtype not in HALF_DTYPES:
        return None, said("peak_other_dtype", dtype=dtype, device=repr(device_name))
    return found[0], said("as_written", text=found[1])


def kv_cache_bytes(shape: TransformerShape, tokens: int, batch: int, dtype_bytes: int) -> int:
    """Bytes of a full KV cache: 2 (K and V) x layers x kv_heads x head_dim x tokens x batch x
    dtype bytes, ``tokens`` = cached positions per sequence (prompt + max_new_tokens)."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * tokens * batch * dtype_bytes
