"""afbench's own fused RMSNorm ops for devices without a native one (cpu, cuda).

``afbench::add_rms_norm(x1, x2, weight, eps) -> (y, rstd, x)`` has the contract of
``torch_npu.npu_add_rms_norm`` (docs/reference.md §4): ``x = x1 + x2`` (the new residual) and
``y = weight * rmsnorm(x)``; ``rstd`` is ``1/sqrt(mean(x², -1) + eps)`` in float32, shape
``x.shape[:-1] + (1,)``. ``afbench::rms_norm(x, weight, eps) -> (y, rstd)`` is the plain norm.

Each is a ``torch.library`` custom op, so it shows up as one op in the profiler and stays
opaque (one call) inside an outer ``torch.compile``; its body is one inductor-generated kernel
(``torch.compile`` of the math, C++ on cpu, Triton on cuda), compiled on first use. Backward
is a second custom op of the same kind. The math matches transformers' Qwen3RMSNorm: compute in
float32, cast the normalised value back to the input dtype, then multiply by the weight.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def rms_norm_math(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (xf * rstd).to(x.dtype), rstd


def add_rms_norm_math(
    x1: Tensor, x2: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    x = x1 + x2
    y, rstd = rms_norm_math(x, weight, eps)
    return y, rstd, x


def rms_norm_backward_math(
    dy: Tensor, x: Tensor, rstd: Tensor, weight: Tensor
) -> tuple[Tensor, Tensor]:
    """Gradients (dx, dweight) of y = weight * (x * rstd)."""
    xhat = x.float() * rstd
    g = dy.float() * weight.float()
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dweight = (dy.float() * xhat.to(x.dtype).float()).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dweight.to(weight.dtype)


@functools.cache
def _compiled(fn):
    # dynamic=True: one kernel serves prefill, decode and training shapes without recompiling.
    return torch.compile(fn, dynamic=True, fullgraph=True)


@torch.library.custom_op("afbench::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return _compiled(rms_norm_math)(x, weight, eps)


@rms_norm.register_fake
def _(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    y = x.new_empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype))
    return y, x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


@torch.library.custom_op("afbench::add_rms_norm", mutates_args=())
def add_rms_norm(
    x1: Tensor, x2: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    return _compiled(add_rms_norm_math)(x1, x2, weight, eps)


@add_rms_norm.register_fake
def _(x1: Tensor, x2: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    x = x1.new_empty(x1.shape, dtype=torch.promote_types(x1.dtype, x2.dtype))
    y = x.new_empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype))
    return y, x.new_empty((*x.shape[:-1], 1), dtype=torch.float32), x


@torch.library.custom_op("afbench::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: Tensor, x: Tensor, rstd: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    return _compiled(rms_norm_backward_math)(dy, x, rstd, weight)


@rms_norm_backward.register_fake
def _(dy: Tensor, x: Tensor, rstd: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _setup_rms(ctx, inputs, output) -> None:
    x, weight, _ = inputs
    ctx.save_for_backward(x, output[1], weight)


def _backward_rms(ctx, dy, _drstd):
    x, rstd, weight = ctx.saved_tensors
    dx, dweight = rms_norm_backward(dy, x, rstd, weight)
    return dx, dweight, None


def _setup_add(ctx, inputs, output) -> None:
    _, _, weight, _ = inputs
    ctx.save_for_backward(output[2], output[1], weight)


def _backward_add(ctx, dy, _drstd, dx_out):
    x, rstd, weight = ctx.saved_tensors
    dx, dweight = rms_norm_backward(dy, x, rstd, weight)
    if dx_out is not None:
        dx = dx + dx_out
    return dx, dx, dweight, None


rms_norm.register_autograd(_backward_rms, setup_context=_setup_rms)
add_rms_norm.register_autograd(_backward_add, setup_context=_setup_add)
