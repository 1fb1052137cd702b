"""The builtin inference loop: prefill + greedy decode with a KV cache, timed per token.

One *generation run* processes every prompt (in batches of ``batch_size``); it is the "step" of
an inference experiment: ``warmup_runs`` runs first (not measured), then ``measured_runs``.
Per run: prompt tokens, generated tokens, total time (s), tokens/s, TTFT (ms, prefill up to
the first token, mean over batches) and TPOT (ms per decode step: mean, p50, p90). Every decode
step's latency goes to ``metrics.jsonl``; the texts of the first measured run go to
``generations.jsonl`` and its per-token logits of the first prompt to ``logits.safetensors``
(for parity against the baseline).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import torch

from afbench.analysis.sanity import sanity_check
from afbench.backends.base import Backend
from afbench.config.models import InferScheduler
from afbench.engines import data as chat
from afbench.engines import efficiency
from afbench.engines.common import environment_info, prepare_model
from afbench.engines.distributed import DistInfo
from afbench.engines.metrics import MetricsWriter
from afbench.errors import ConfigError
from afbench.runspec import RunSpec
from afbench.store.names import METRICS
from afbench.store.result import RunResult
from afbench.switches.base import SwitchContext
from afbench.switches.registry import apply_stage, ready_switches
from afbench.switches.step_profiler import NoProfiler


def load_prompts(cfg: Any, s: InferScheduler) -> list[list[dict[str, str]]]:
    """Prompt conversations: ``data.prompts_file`` (JSONL of {"prompt": str} or {"messages": [...]})
    or, by default, each conversation of ``data.path`` up to and including its first user turn."""
    if cfg.data.prompts_file:
        path = Path(cfg.data.prompts_file)
        if not path.is_file():
            raise ConfigError(f"data.prompts_file: {path} does not exist")
        rows = [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        prompts = [
            r["messages"] if "messages" in r else [{"role": "user", "content": r["prompt"]}]
            for r in rows
        ]
    else:
        prompts = []
        for conv in chat.load_conversations(cfg.data.path, cfg.data.max_samples):
            first_user = next((i for i, m in enumerate(conv) if m["role"] == "user"), None)
            if first_user is not None:
                prompts.append(conv[: first_user + 1])
    return prompts[: s.num_prompts]


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return float(torch.tensor(values, dtype=torch.float64).quantile(q / 100).item())


class Generator:
    """Greedy decoding of one batch of left-padded prompts with a KV cache."""

    def __init__(
        self,
        model: Any,
        forward: Any,
        backend: Backend,
        s: InferScheduler,
        eos_ids: set[int],
        pad_id: int,
        graph_step: Any = None,
    ) -> None:
        self.model, self.forward, self.backend, self.s = model, forward, backend, s
        self.eos_ids, self.pad_id, self.graph_step = eos_ids, pad_id, graph_step

    def _cache(self, max_len: int) -> Any:
        # transformers' cache classes: the generation loop's only transformers import
        from transformers import DynamicCache, StaticCache

        if self.s.kv_cache == "static" or self.graph_step is not None:
            return StaticCache(config=self.model.config, max_cache_len=max_len)
        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def generate(self, batch: list[list[int]], keep_logits: bool = False) -> dict[str, Any]:
        device = self.backend.device()
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, p in enumerate(batch):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        cache = self._cache(width + self.s.max_new_tokens)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.backend.synchronize()
        t0 = time.perf_counter()
        logits = self.forward(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        token = logits.argmax(-1)
        self.backend.synchronize()
        ttft = time.perf_counter() - t0
        out = [[int(t)] for t in token.tolist()]
        kept = [logits[0].float().cpu()] if keep_logits else []
        done = torch.tensor([t in self.eos_ids for t in token.tolist()], device=device)
        latencies = []
        pos = positions[:, -1]
        for _ in range(self.s.max_new_tokens - 1):
            if self.s.stop_at_eos and bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos + 1
            t1 = time.perf_counter()
            step = self.graph_step or self.forward
            logits = step(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=pos[:, None],
                cache=cache,
                use_cache=True,
            ).logits[:, -1]
            token = torch.where(done, torch.full_like(token, self.pad_id), logits.argmax(-1))
            self.backend.synchronize()
            latencies.append(time.perf_counter() - t1)
            if keep_logits:
                kept.append(logits[0].float().cpu())
            for i, t in enumerate(token.tolist()):
                if not bool(done[i]):
                    out[i].append(int(t))
            done = done | torch.tensor([t in self.eos_ids for t in token.tolist()], device=device)
        total = time.perf_counter() - t0
        if self.s.stop_at_eos:
            out = [
                seq[: next((k + 1 for k, t in enumerate(seq) if t in self.eos_ids), len(seq))]
                for seq in out
            ]
        return {
            "tokens": out,
            "ttft_s": ttft,
            "decode_s": latencies,
            "total_s": total,
            "logits": torch.stack(kept) if kept else None,
        }


def run_infer(spec: RunSpec, backend: Backend, run_dir: Path) -> RunResult:
    """Run the inference workload of ``spec``; returns the result record (result.json).

    Raises RunSkipped when graph mode is asked for on a backend without it, ConfigError on bad
    model/data paths.
    """
    cfg = spec.config
    s = cfg.scheduler
    assert isinstance(s, InferScheduler)
    ctx = SwitchContext(cfg, backend, run_dir, unit="runs")
    ready_switches(ctx)  # fail fast, before loading anything (graph mode on cpu)
    tokenizer, switches = prepare_model(ctx, train=False)
    switches += apply_stage("decode", ctx)
    model, forward, graph_step = ctx.model, ctx.forward, ctx.graph_step

    prompts = load_prompts(cfg, s)
    encoded = []
    for conv in prompts:
        ids = tokenizer.apply_chat_template(
            conv,
            tokenize=True,
            add_generation_prompt=True,
            enable_thinking=s.enable_thinking,
            return_dict=False,
        )
        encoded.append(list(ids)[-s.input_truncated_len :])
    end = {
        tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>",) if t in tokenizer.get_vocab()
    }
    eos_ids = end | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids, default=0)
    )
    gen = Generator(model, forward, backend, s, eos_ids, pad_id, graph_step)
    batches = [encoded[i : i + s.batch_size] for i in range(0, len(encoded), s.batch_size)]

    metrics = MetricsWriter(run_dir / METRICS)
    switches += apply_stage("steps", ctx)
    profiler = ctx.profiler or NoProfiler()
    window = efficiency.MeasuredWindow(backend, s.measure, metrics, DistInfo(), unit="runs")
    first_run_s = None
    kept_texts: list[dict[str, Any]] = []
    with profiler, contextlib.closing(metrics):
        for run in range(1, s.steps + 1):
            window.before_step(run)
            measured = run > s.warmup_runs
            keep = run == s.warmup_runs + 1
            prompt_tokens = generated = 0
            ttfts, decode, total = [], [], 0.0
            for b, batch in enumerate(batches):
                res = gen.generate(batch, keep_logits=keep and b == 0)
                prompt_tokens += sum(len(p) for p in batch)
                generated += sum(len(t) for t in res["tokens"])
                ttfts.append(res["ttft_s"])
                decode.extend(res["decode_s"])
                total += res["total_s"]
                for k, lat in enumerate(res["decode_s"]):
                    metrics.write("decode", run=run, batch=b, index=k + 1, latency_ms=lat * 1e3)
                if keep:
                    for i, toks in enumerate(res["tokens"]):
                        kept_texts.append(
                            {
                                "prompt_index": b * s.batch_size + i,
                                "token_ids": toks,
                                "text": tokenizer.decode(toks, skip_special_tokens=True),
                            }
                        )
                    if res["logits"] is not None:
                        # safetensors only when logits are kept for the parity check
                        from safetensors.torch import save_file

                        save_file(
                            {"logits": res["logits"].contiguous()},
                            str(run_dir / "logits.safetensors"),
                        )
            window.after_step(run, total)
            if first_run_s is None:
                first_run_s = total
            tpot = [d * 1e3 for d in decode]
            rec = {
                "step": run,
                "measured": measured,
                "prompt_tokens": prompt_tokens,
                "generated_tokens": generated,
                "total_time_s": total,
                "step_time_s": total,
                "tokens_per_s": generated / total if total else None,
                "ttft_ms": sum(ttfts) / len(ttfts) * 1e3,
                "tpot_ms_mean": sum(tpot) / len(tpot) if tpot else None,
                "tpot_ms_p50": _percentile(tpot, 50),
                "tpot_ms_p90": _percentile(tpot, 90),
            }
            metrics.write("step", **rec)
            print(
                f"step: {run:2d}  generated_tokens: {generated}  elapsed_time_per_step: {total:.6f}s  "
                f"tokens_per_s: {rec['tokens_per_s']:.2f}  ttft_ms: {rec['ttft_ms']:.2f}  "
                f"tpot_ms: {rec['tpot_ms_mean'] or 0:.3f}{'' if measured else '  (warmup)'}",
                flush=True,
            )
            profiler.step()
    with open(run_dir / "generations.jsonl", "w", encoding="utf-8") as fh:
        for row in kept_texts:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    sanity = sanity_check([r["text"] for r in kept_texts], [r["token_ids"] for r in kept_texts])
    return RunResult.from_fields(
        {
            "workload": "infer",
            **environment_info(backend),
            "params": sum(p.numel() for p in model.parameters()),
            "num_prompts": len(encoded),
            "first_step_s": first_run_s,
            **window.result_fields(),
            **efficiency.kv_cache_fields(
                model.config.to_dict(),
                [(max(len(p) for p in b), len(b)) for b in batches],
                s.max_new_tokens,
                cfg.model.dtype,
            ),
            "sanity": sanity,
            "switches": [vars(sw) for sw in switches],
        }
    )
