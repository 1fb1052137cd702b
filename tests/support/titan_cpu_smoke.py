"""TEST-ONLY launcher: torchtitan 0.3.0's own ``torchtitan.train.main`` on a CPU, eager, one
process, so that tests/test_torchtitan_real.py can feed real torchtitan output through afbench's
parsers. Never a product path: afbench's preflight refuses ``engine=torchtitan`` on cpu.

torchtitan 0.3.0 does not run on a CPU as shipped; each shim below fills one gap and changes
nothing torchtitan computes on an accelerator:

* device: torchtitan picks ``torch._utils._get_available_device_type() or "cuda"`` at import;
  here it gets ``"cpu"``, and ``torch.cpu`` gets the few memory calls torchtitan's
  ``DeviceMemoryMonitor`` makes (the peak resident set stands in for reserved memory).
* ``torchtitan.distributed.utils.set_pg_timeouts``: after step 1 torchtitan shortens every
  process group's timeout with a device barrier and ``torch.distributed.set_timeout`` (absent
  in torch 2.13.0); for one gloo process it is a no-op here.
* attention: torch has no FlexAttention backward on CPU (and torchtitan 0.3.0 refuses SDPA for
  language models), so torchtitan's compiled FlexAttention call is replaced by SDPA with the
  same mask: the ``BlockMask``'s own ``mask_mod`` (block-causal over the packed documents)
  evaluated densely by ``torch.nn.attention.flex_attention.create_mask``.

Run as ``python -m titan_cpu_smoke <torchtitan options>`` with ``tests/support`` on PYTHONPATH
(afbench's ``engine.entry=titan_cpu_smoke``).
"""

from __future__ import annotations

import resource
import types

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"


def _rss_stats(device=None) -> dict[str, int]:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "active_bytes.all.peak": peak,
        "reserved_bytes.all.peak": peak,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }


def _total_memory() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


torch.cpu.get_device_name = lambda device=None: "cpu"
torch.cpu.get_device_properties = lambda device=None: types.SimpleNamespace(
    name="cpu", total_memory=_total_memory()
)
torch.cpu.memory_stats = _rss_stats
torch.cpu.reset_peak_memory_stats = lambda device=None: None
torch.cpu.empty_cache = lambda: None

import torchtitan.distributed.utils as titan_dist  # noqa: E402
from torch.nn.attention.flex_attention import create_mask  # noqa: E402
from torchtitan.models.common.attention import FlexAttention  # noqa: E402
from torchtitan.train import main  # noqa: E402  (after the device shim)

_MASK: dict = {}


def _masked_sdpa(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
    """FlexAttention's result (B, N, L, H) for a mask-only call, by SDPA on a dense mask."""
    if score_mod is not None or return_aux.lse:
        raise NotImplementedError("titan_cpu_smoke: only mask-only FlexAttention calls")
    key = (id(block_mask), q.shape[0], q.shape[2], k.shape[2])
    if _MASK.get("key") != key:  # one mask per batch, shared by every layer
        _MASK.update(
            key=key,
            mask=create_mask(
                block_mask.mask_mod, q.shape[0], None, q.shape[2], k.shape[2], device=q.device
            ),
        )
    mask = _MASK["mask"]
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
    )
    return out, None


FlexAttention.compiled_flex_attn = staticmethod(_masked_sdpa)
titan_dist.set_pg_timeouts = lambda timeout, parallel_dims: None

if __name__ == "__main__":
    main()
