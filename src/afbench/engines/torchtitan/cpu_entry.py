"""torchtitan on CPU: SDPA attention, inductor C++. torchtitan 0.3.0's own trainer
(``torchtitan.train.main``) on a CPU, eager or compiled, one process or several over gloo.

afbench runs ``torchrun ... -m afbench.engines.torchtitan.cpu_entry <torchtitan options>`` in
place of ``-m torchtitan.train`` when a run's backend is cpu
(:func:`afbench.engines.torchtitan.cmdline.entry_module`). torchtitan 0.3.0 does not run on a
CPU as shipped; each patch below fills one gap, by name, and changes nothing torchtitan computes
on an accelerator (this module is never imported there). Its results describe torchtitan on a
CPU, never a GPU or NPU run: the result's ``device`` says so
(:data:`afbench.engines.torchtitan.cmdline.CPU_LABEL`). Importing this module changes nothing;
:func:`apply_patches` does, and has to run before anything imports torchtitan.

1. device (``torchtitan.tools.utils.device_type``): torchtitan picks
   ``torch._utils._get_available_device_type() or "cuda"`` when it is imported, and a
   CPU-only torch has no accelerator; here it gets ``"cpu"`` (so gloo, ``torch.cpu``).
2. memory monitor (``torchtitan.components.metrics.device_module``): torchtitan's
   ``DeviceMemoryMonitor`` reads ``memory_stats`` / ``get_device_properties`` of the device
   module, which ``torch.cpu`` lacks; it gets :class:`CpuMemory`, whose peak is the process's
   peak resident set (``getrusage``, never reset: the peak since the process started) and
   whose capacity is the machine's physical memory.
3. attention (``FlexAttention.compiled_flex_attn``): torch has no FlexAttention backward on
   CPU, and torchtitan 0.3.0 refuses SDPA for language models (``get_attention_config``);
   the FlexAttention call becomes SDPA with the same mask: the ``BlockMask``'s own
   ``mask_mod`` (block-causal over the packed documents), made dense once per batch in
   ``Decoder.get_attention_masks`` (eager, outside the compiled blocks) and carried on the
   BlockMask, so that ``--compile.enable`` compiles each block once (inductor's C++ backend
   on CPU) instead of once per batch (a cache keyed by ``id(block_mask)`` inside the block
   made dynamo recompile every step, up to its recompile limit).
4. ``torch.distributed.set_timeout`` (called by ``set_pg_timeouts`` after step 1; absent in
   torch 2.13.0): torch's own ``distributed_c10d._set_pg_timeout``, which sets a gloo
   group's timeout, stands in; and ``set_pg_timeouts``' barrier runs without device ids
   (``torch.cpu.current_device()`` is the string ``"cpu"``).
5. FSDP over gloo (``torchtitan.distributed.fsdp.disable_fsdp_gradient_division``): with
   torchtitan's gradient divide factor 1.0 FSDP reduce-scatters with ``PREMUL_SUM(1.0)``,
   which gloo lacks; FSDP is also told to reduce with ``SUM``
   (``set_force_sum_reduction_for_comms``), the same sum. Several processes also need
   ``--parallelism.spmd_backend partial_dtensor`` (afbench's preflight names it).
"""

from __future__ import annotations

import os
import resource
import types
from collections.abc import Callable
from datetime import timedelta

import torch
from torch.distributed.fsdp import FSDPModule
from torch.nn.attention.flex_attention import create_mask


class CpuMemory:
    """The device-module calls of torchtitan's ``DeviceMemoryMonitor``, for the CPU (patch 2):
    bytes; the peak is the process's peak resident set."""

    @staticmethod
    def memory_stats(device=None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }

    @staticmethod
    def get_device_properties(device=None) -> types.SimpleNamespace:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return types.SimpleNamespace(name="cpu", total_memory=total)

    get_device_name = staticmethod(lambda device=None: "cpu")
    current_device = staticmethod(lambda: 0)
    reset_peak_memory_stats = staticmethod(lambda device=None: None)
    empty_cache = staticmethod(lambda: None)


def with_dense_mask(get_attention_masks: Callable) -> Callable:
    """``Decoder.get_attention_masks`` whose BlockMask for ``positions`` (B, L) also carries
    its dense boolean mask (B, 1, L, L) as ``dense`` (patch 3)."""

    def dense_attention_masks(self, positions):
        block_mask = get_attention_masks(self, positions)
        if block_mask is not None and hasattr(block_mask, "mask_mod"):
            b, n = positions.shape
            block_mask.dense = create_mask(
                block_mask.mask_mod, b, None, n, n, device=positions.device
            )
        return block_mask

    return dense_attention_masks


def masked_sdpa(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
    """FlexAttention's result (B, N, L, H) for a mask-only call, by SDPA on the dense mask
    that :func:`with_dense_mask` attached (patch 3)."""
    if score_mod is not None or return_aux.lse:
        raise NotImplementedError("torchtitan on CPU: only mask-only FlexAttention calls")
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=block_mask.dense, scale=scale, enable_gqa=enable_gqa
    )
    return out, None


def set_pg_timeouts(timeout: timedelta, parallel_dims) -> None:
    """torchtitan's ``set_pg_timeouts`` for gloo (patch 4): a barrier, then each group's
    timeout set by ``torch.distributed.set_timeout`` (torch's ``_set_pg_timeout`` where torch
    lacks it)."""
    import torch.distributed.distributed_c10d as c10d

    set_timeout = getattr(torch.distributed, "set_timeout", c10d._set_pg_timeout)
    torch.distributed.barrier()
    meshes = parallel_dims.get_all_one_dimensional_meshes().values()
    for group in [mesh.get_group() for mesh in meshes] + [None]:
        set_timeout(timeout, group)


def sum_reduction_fsdp(model: torch.nn.Module) -> None:
    """torchtitan's gradient divide factor 1.0, reduced with ``SUM`` (patch 5)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def apply_patches() -> None:
    """Patches 1-5, in this process; call before anything imports torchtitan (its device
    type is read when ``torchtitan.tools.utils`` is imported)."""
    import torch._utils

    torch._utils._get_available_device_type = lambda: "cpu"
    import torchtitan.components.metrics as titan_metrics
    import torchtitan.distributed.fsdp as titan_fsdp
    import torchtitan.distributed.utils as titan_dist
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.models.common.decoder import Decoder

    titan_metrics.device_module = CpuMemory
    Decoder.get_attention_masks = with_dense_mask(Decoder.get_attention_masks)
    FlexAttention.compiled_flex_attn = staticmethod(masked_sdpa)
    titan_dist.set_pg_timeouts = set_pg_timeouts
    titan_fsdp.disable_fsdp_gradient_division = sum_reduction_fsdp


def main() -> None:
    """torchtitan's trainer (``torchtitan.train.main``, options from ``sys.argv``), patched."""
    apply_patches()
    from torchtitan.train import main as titan_main

    titan_main()


if __name__ == "__main__":
    main()
