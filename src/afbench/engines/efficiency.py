"""Peak memory over the measured window, TFLOPs/MFU and KV-cache size for the builtin engine.

What :func:`afbench.engines.sft.run_sft` and :func:`afbench.engines.infer.run_infer` record
(field names and units: :mod:`afbench.analysis.efficiency` and the docstrings below). The
arithmetic is :mod:`afbench.analysis.flops`; this module only ties it to a running model, a
backend and the ranks of a torchrun job.
"""

from __future__ import annotations

from typing import Any

from afbench.analysis import flops
from afbench.analysis.contention import WindowSampler

# the FLOP count is pure arithmetic, shared with the torch-free torchtitan worker
from afbench.analysis.efficiency import TFLOPS_SOURCE, training_efficiency  # noqa: F401
from afbench.backends.base import Backend, PeakMemory
from afbench.config.models import StepWindow
from afbench.engines import distributed as ddp
from afbench.engines.metrics import MetricsWriter
from afbench.messages import Message, say

#: The KV-cache formula's catalog key: 2 (K, V) x layers x kv_heads x head_dim x (longest
#: prompt + max_new_tokens) x batch x dtype bytes, from config.json.
KV_CACHE_SOURCE = "src_kv_cache"
PEAK_FIELDS = ("peak_memory_allocated_gib", "peak_memory_reserved_gib", "peak_rss_gib")


class MeasuredWindow:
    """Peak memory and contention of the measured steps: the counters are reset (the host
    sampled, :mod:`afbench.analysis.contention`) right before the window's first step (after
    the warm-up steps) and read right after its last, every rank its own (rank 0's contention
    is kept). Threads asked: torch's intra-op threads on cpu; on cuda/npu None (the host
    process feeds the device: its CPU/wall is shown, not held against a thread count).

    Call :meth:`before_step` before timing a step and :meth:`after_step` after it; then
    :meth:`result_fields` on every rank (it gathers over the ranks of a torchrun job).
    """

    def __init__(
        self,
        backend: Backend,
        window: StepWindow,
        metrics: MetricsWriter,
        info: ddp.DistInfo,
        unit: str = "steps",
    ) -> None:
        self.backend, self.window, self.metrics, self.info = backend, window, metrics, info
        self.label: Message = say(
            f"memory_window_{unit}",
            first=window.first_step,
            last=window.last_step,
            warm=window.first_step - 1,
        )
        self.seconds = 0.0
        self.steps = 0
        self.peak: PeakMemory | None = None
        threads = None
        if backend is not None and backend.name == "cpu":
            import torch  # the builtin engine's worker has it loaded already

            threads = torch.get_num_threads()
        self.contention = WindowSampler(
            threads=threads,
            scope="window",
            source=f"builtin engine process, {unit} {window.first_step}-{window.last_step}",
        )

    def before_step(self, step: int) -> None:
        if step == self.window.first_step:
            self.backend.synchronize()  # the warm-up's device work belongs to the warm-up
            self.backend.reset_peak_memory()
            self.contention.start()

    def after_step(self, step: int, step_time_s: float) -> None:
        if self.window.first_step <= step <= self.window.last_step:
            self.seconds += step_time_s
            self.steps += 1
        if step == self.window.last_step:
            self.contention.end()
            self.peak = self.backend.peak_memory()
            self.metrics.write(
                "memory",
                rank=self.info.rank,
                memory_window=self.label.model_dump(),
                **self.peak.fields(),
            )

    def result_fields(self) -> dict[str, Any]:
        """result.json fields: each peak as the max over ranks (GiB), ``memory_source``,
        ``memory_window``, ``memory_per_rank`` (one dict of the peaks per rank, in rank
        order) and ``contention`` (this rank's record, None when the window did not
        complete). A collective under torchrun: every rank must call it."""
        peak = self.peak or PeakMemory(source=say("src_window_not_ended"))
        return {
            **memory_fields(ddp.gather_objects(peak.fields(), self.info), self.label),
            "contention": self.contention.record(),
        }


def memory_fields(per_rank: list[dict[str, Any]], window: Message) -> dict[str, Any]:
    """Max over ranks of each peak (None where no rank measured it), the source (the ranks'
    distinct sources as one ``clauses`` message where they differ), the window and the
    per-rank dicts (``rank`` added)."""
    out: dict[str, Any] = {}
    for key in PEAK_FIELDS:
        values = [r[key] for r in per_rank if r.get(key) is not None]
        out[key] = max(values) if values else None
    sources = [Message.model_validate(r["memory_source"]) for r in per_rank]
    distinct = list(dict.fromkeys(sources))
    out["memory_source"] = distinct[0] if len(distinct) == 1 else say("clauses", items=distinct)
    out["memory_window"] = window
    out["memory_per_rank"] = [{"rank": i, **r} for i, r in enumerate(per_rank)]
    return out


def kv_cache_fields(
    model_config: dict[str, Any], batches: list[tuple[int, int]], max_new_tokens: int, dtype: str
) -> dict[str, Any]:
    """Size of the largest KV cache one generation holds at full length.

    Args:
        batches: (longest prompt in tokens, sequences) of each batch: prompts are left-padded
            to the longest, so every sequence caches that many positions + ``max_new_tokens``.

    Returns:
        ``kv_cache_gib`` (GiB, model dtype, K and V of every layer; an upper bound when
        generation stops at EOS first), ``kv_cache_tokens`` (positions per sequence) and
        ``kv_cache_batch`` (sequences) of that batch, ``kv_cache_source`` (the formula).

    All None without prompts or with a config the count cannot read (the reason is then in
    ``kv_cache_source``).
    """
    none = {"kv_cache_gib": None, "kv_cache_tokens": None, "kv_cache_batch": None}
    if not batches:
        return none | {"kv_cache_source": say("kv_no_prompts")}
    try:
        shape = flops.TransformerShape.from_config(model_config, "model config.json")
    except flops.ModelConfigError as exc:
        return none | {"kv_cache_source": say("na_error", error=str(exc))}
    width, batch = max(batches, key=lambda b: (b[0] + max_new_tokens) * b[1])
    tokens = width + max_new_tokens
    size = flops.kv_cache_bytes(shape, tokens, batch, flops.DTYPE_BYTES[dtype])
    return {
        "kv_cache_gib": size / 2**30,
        "kv_cache_tokens": tokens,
        "kv_cache_batch": batch,
        "kv_cache_source": say(KV_CACHE_SOURCE),
    }
