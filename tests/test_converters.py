"""add_rmsnorm / rmsnorm converters: same outputs and gradients as the unfused model, the
number of rewritten sites, and a loud error when there is nothing to rewrite."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from afbench.assets.manifest import default_assets_dir
from afbench.backends.resolve import get_backend
from afbench.errors import ConfigError
from afbench.switches import fused_ops
from afbench.switches.converters import apply_add_rmsnorm, apply_rmsnorm


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(default_assets_dir() / "qwen3_tiny")


@pytest.fixture(scope="module")
def cpu():
    return get_backend("cpu")


def test_fused_add_rms_norm_matches_reference_math_fp32():
    x1, x2 = torch.randn(3, 5, 64), torch.randn(3, 5, 64)
    w = torch.rand(64) + 0.5
    y, rstd, x = fused_ops.add_rms_norm(x1, x2, w, 1e-6)
    ref_x = x1 + x2
    ref_rstd = torch.rsqrt(ref_x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(x, ref_x)
    torch.testing.assert_close(rstd, ref_rstd)
    torch.testing.assert_close(y, w * ref_x * ref_rstd, rtol=1e-5, atol=1e-6)


def test_fused_add_rms_norm_bf16_within_one_ulp():
    x1, x2 = torch.randn(2, 7, 128).bfloat16(), torch.randn(2, 7, 128).bfloat16()
    w = (torch.rand(128) + 0.5).bfloat16()
    y, _, _ = fused_ops.add_rms_norm(x1, x2, w, 1e-6)
    ref, _, _ = fused_ops.add_rms_norm_math(x1, x2, w, 1e-6)
    assert y.dtype == torch.bfloat16
    # one bf16 ulp at |y| <= 8 is 2**-4; allow it, nothing more
    assert (y.float() - ref.float()).abs().max().item() <= 2**-4


def test_fused_add_rms_norm_gradients_match_autograd_of_reference():
    x1 = torch.randn(2, 4, 32, requires_grad=True)
    x2 = torch.randn(2, 4, 32, requires_grad=True)
    w = (torch.rand(32) + 0.5).requires_grad_()
    y, _, x = fused_ops.add_rms_norm(x1, x2, w, 1e-6)
    (y.square().sum() + x.sum()).backward()
    got = [t.grad.clone() for t in (x1, x2, w)]
    for t in (x1, x2, w):
        t.grad = None
    ry, _, rx = fused_ops.add_rms_norm_math(x1, x2, w, 1e-6)
    (ry.square().sum() + rx.sum()).backward()
    for g, t in zip(got, (x1, x2, w)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-5)


def test_add_rmsnorm_rewrites_one_site_per_layer_and_keeps_outputs(tiny, cpu):
    fused = copy.deepcopy(tiny)
    report = apply_add_rmsnorm(fused, cpu)
    assert report.evidence["sites"] == tiny.config.num_hidden_layers
    ids = torch.randint(0, tiny.config.vocab_size, (2, 48))
    a = tiny(input_ids=ids, labels=ids)
    b = fused(input_ids=ids, labels=ids)
    torch.testing.assert_close(b.logits, a.logits, rtol=1e-4, atol=1e-4)
    a.loss.backward()
    b.loss.backward()
    ref = dict(tiny.named_parameters())
    for name, p in fused.named_parameters():
        torch.testing.assert_close(p.grad, ref[name].grad, rtol=1e-3, atol=1e-5)
    tiny.zero_grad()


def test_rmsnorm_replaces_every_remaining_norm(tiny, cpu):
    fused = copy.deepcopy(tiny)
    apply_add_rmsnorm(fused, cpu)
    report = apply_rmsnorm(fused, cpu, skip_post_attention=True)
    layers = tiny.config.num_hidden_layers
    # input_layernorm + q_norm + k_norm per layer, plus the final norm
    assert report.evidence["sites"] == 3 * layers + 1
    ids = torch.randint(0, tiny.config.vocab_size, (1, 32))
    with torch.no_grad():
        torch.testing.assert_close(
            fused(input_ids=ids).logits, tiny(input_ids=ids).logits, rtol=1e-4, atol=1e-4
        )


def test_converted_model_decodes_with_kv_cache_like_the_original(tiny, cpu):
    fused = copy.deepcopy(tiny)
    apply_add_rmsnorm(fused, cpu)
    ids = torch.randint(0, tiny.config.vocab_size, (1, 12))
    with torch.no_grad():
        cache = DynamicCache(config=fused.config)
        fused(input_ids=ids[:, :11], cache=cache, use_cache=True)
        step = fused(input_ids=ids[:, 11:], cache=cache, use_cache=True).logits[:, -1]
        full = tiny(input_ids=ids).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-4)


def test_converter_with_nothing_to_rewrite_is_an_error(cpu):
    with pytest.raises(ConfigError, match="optimization.add_rmsnorm"):
        apply_add_rmsnorm(torch.nn.Sequential(torch.nn.Linear(4, 4)), cpu)
    with pytest.raises(ConfigError, match="optimization.rmsnorm"):
        apply_rmsnorm(torch.nn.Sequential(torch.nn.Linear(4, 4)), cpu, skip_post_attention=False)


def test_fused_op_is_one_profiler_op(tiny, cpu):
    fused = copy.deepcopy(tiny)
    apply_add_rmsnorm(fused, cpu)
    ids = torch.randint(0, tiny.config.vocab_size, (1, 16))
    with torch.no_grad(), torch.profiler.profile() as prof:
        fused(input_ids=ids)
    counts = {e.key: e.count for e in prof.key_averages()}
    assert counts.get("afbench::add_rms_norm") == tiny.config.num_hidden_layers
