"""Model converters: the ``add_rmsnorm`` and ``rmsnorm`` switches (torchtitan's converter idea).

``add_rmsnorm`` rewrites every decoder layer of the Qwen3/Qwen2/Llama family so that the
residual add after attention and the following RMSNorm are one fused op (on NPU
``torch_npu.npu_add_rms_norm``, elsewhere ``afbench::add_rms_norm``). ``rmsnorm`` replaces
every remaining RMSNorm module (input norms, q/k norms, the final norm) with a fused op (on NPU
``torch_npu.npu_rms_norm``, elsewhere ``afbench::rms_norm``). Each reports how many sites it
rewrote; a converter that finds nothing to rewrite raises ConfigError instead of silently doing
nothing.
"""

from __future__ import annotations

import types
from typing import Any, Callable

import torch
from torch import nn

from afbench.backends.base import Backend
from afbench.errors import ConfigError
from afbench.messages import say
from afbench.switches import SwitchReport


def _is_rmsnorm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight")


def _eps(norm: nn.Module) -> float:
    for name in ("variance_epsilon", "eps", "epsilon"):
        if hasattr(norm, name):
            return float(getattr(norm, name))
    raise ConfigError(f"{type(norm).__name__} has no epsilon attribute the rmsnorm converters know")


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    return [
        m
        for m in model.modules()
        if all(
            hasattr(m, a)
            for a in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
        )
    ]


def _fused_decoder_forward(
    self: nn.Module, hidden_states: torch.Tensor, **kwargs: Any
) -> torch.Tensor:
    """Decoder layer with (residual add + post-attention RMSNorm) as one op. Same math as
    transformers' Qwen3DecoderLayer.forward; the model passes every argument but the hidden
    states by keyword, and attention takes them as they are."""
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(hidden_states=hidden_states, **kwargs)
    norm = self.post_attention_layernorm
    hidden_states, _, residual = self._afbench_add_rms_norm(
        residual, hidden_states, norm.weight, self._afbench_eps
    )
    hidden_states = self.mlp(hidden_states)
    return residual + hidden_states


class FusedRMSNorm(nn.Module):
    """Drop-in for an RMSNorm module: same weight, one fused op."""

    def __init__(self, weight: nn.Parameter, eps: float, op: Callable) -> None:
        super().__init__()
        self.weight = weight
        self.variance_epsilon = eps
        self._op = op

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self._op(hidden_states, self.weight, self.variance_epsilon)[0]


def _ops(backend: Backend) -> tuple[Callable, str, Callable, str]:
    # fused_ops registers torch.library ops: only when a converter runs
    from afbench.switches import fused_ops

    add_op, add_name = backend.add_rms_norm()
    rms_op, rms_name = backend.rms_norm()
    if add_op is None:
        add_op, add_name = fused_ops.add_rms_norm, "afbench::add_rms_norm (inductor-fused kernel)"
    if rms_op is None:
        rms_op, rms_name = fused_ops.rms_norm, "afbench::rms_norm (inductor-fused kernel)"
    return add_op, add_name, rms_op, rms_name


def apply_add_rmsnorm(model: nn.Module, backend: Backend) -> SwitchReport:
    """Rewrite every decoder layer's post-attention (add + RMSNorm). Raises ConfigError if the
    model has no decoder layer of the known shape."""
    add_op, add_name, _, _ = _ops(backend)
    layers = _decoder_layers(model)
    if not layers:
        raise ConfigError(
            f"optimization.add_rmsnorm: {type(model).__name__} has no decoder layer "
            "with input_layernorm/self_attn/post_attention_layernorm/mlp to rewrite"
        )
    for layer in layers:
        layer._afbench_add_rms_norm = add_op
        layer._afbench_eps = _eps(layer.post_attention_layernorm)
        layer.forward = types.MethodType(_fused_decoder_forward, layer)
    return SwitchReport(
        "add_rmsnorm",
        True,
        say("switch_add_rmsnorm", sites=len(layers), op=add_name),
        {"sites": len(layers)},
    )


def apply_rmsnorm(model: nn.Module, backend: Backend, skip_post_attention: bool) -> SwitchReport:
    """Replace RMSNorm modules with FusedRMSNorm. With ``skip_post_attention`` the norms that
    add_rmsnorm already fused are left alone. Raises ConfigError if none is found."""
    _, _, rms_op, rms_name = _ops(backend)
    sites = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not _is_rmsnorm(child) or (
                skip_post_attention and name == "post_attention_layernorm"
            ):
                continue
            setattr(parent, name, FusedRMSNorm(child.weight, _eps(child), rms_op))
            sites += 1
    if not sites:
        raise ConfigError(
            f"optimization.rmsnorm: no RMSNorm module found in {type(model).__name__}"
        )
    return SwitchReport(
        "rmsnorm", True, say("switch_rmsnorm", sites=sites, op=rms_name), {"sites": sites}
    )
