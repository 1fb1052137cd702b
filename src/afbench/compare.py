"""Compare every variant with the baseline: verdicts, gains, parity, compile cost, profiling
status, kernel tables. Pure functions over :class:`afbench.collect.Collected` that build the
typed results of :mod:`afbench.store`; :func:`compare` returns the :class:`Summary` written as
``summary.json`` and handed to the report templates."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from afbench.analysis import kernels as K
from afbench.analysis import traces as T
from afbench.analysis.contention import judge_reasons, uniform_slowdown
from afbench.analysis.steplog import is_placeholder_loss
from afbench.analysis.steptrace import ProfilingResult, profiling_status
from afbench.analysis.stats import finite_mean
from afbench.collect import MEANS, Collected
from afbench.config.models import ReportConfig
from afbench.messages import Message, recorded, say
from afbench.store import (MEMORY_MEASURES, Comparison, Compile, Efficiency, Environment,
                             FusedEvidence, KernelDiffRow, KernelRow, Memory, MemoryChange, Parity,
                             PhaseParameters, ProfilingComparison, RunResult, Side, Speed,
                             StepDeviceTime, Summary, SwitchRecord)
from afbench.runspec import AutoDesign, Plan
from afbench.verdict import (INCONCLUSIVE, ONE_ROUND, RUN_FAILED, SEQUENTIAL, SKIPPED,
                             SequentialDesign, SequentialTest, compare_runs, gain_pct,
                             quick_verdict, verdict_word)
from afbench.verdict.calibration import RunSpread
from afbench.verdict.sequential import INTERRUPTED
from afbench.runspec import INTERRUPTED as RUNSPEC_INTERRUPTED
from afbench.switches.registry import compiles, requested_not_reported

#: Loss parity when a side's logged rank printed the ``loss: -1`` placeholder (pipeline
#: parallelism; :data:`afbench.analysis.steplog.PLACEHOLDER_LOSS`), on any engine.
PLACEHOLDER_LOSS_REASON = say("parity_placeholder").text


def _na(key: str, **args: Any) -> Parity:
    """Parity N/A with the catalog reason ``key`` (labels.yaml), in English and as a message."""
    message = say(key, **args)
    return Parity(status="N/A", reason=message.text, reason_msg=message)

#: ``summary.caveat`` of a one-round experiment: the templates word it (labels.yaml
#: ``caveat_text``); summaries before the verdict library stored the English sentence here.
CAVEAT = "one_round"


def loss_parity(steps: pd.DataFrame, baseline_ids: list[str], variant_ids: list[str],
                rtol: float) -> Parity:
    """Per-step loss of baseline vs variant (first repeat of each): MATCH when every step's
    |Δloss| <= rtol x |baseline loss|, else DIVERGED (first diverging step named); N/A when a
    side has no losses, with :data:`PLACEHOLDER_LOSS_REASON` when a side's steps carry the
    placeholder loss (``loss_placeholder``, or every logged loss exactly -1)."""
    placeholder = False
    if not steps.empty and baseline_ids and variant_ids and "loss_placeholder" in steps:
        # steps with the placeholder carry no loss (None): the steps with a real loss on both
        # sides are compared; N/A with the placeholder reason only when none is left
        pair = steps[steps.run_id.isin([baseline_ids[0], variant_ids[0]])]
        placeholder = bool(pair["loss_placeholder"].eq(True).any())
    if steps.empty or not baseline_ids or not variant_ids or "loss" not in steps:
        return _na("parity_placeholder" if placeholder else "parity_no_losses")
    a = steps[steps.run_id == baseline_ids[0]].set_index("step")["loss"].dropna()
    b = steps[steps.run_id == variant_ids[0]].set_index("step")["loss"].dropna()
    if any(len(x) and x.map(is_placeholder_loss).all() for x in (a, b)):
        # a constant -1 logged as a loss (records written before engines marked it)
        return _na("parity_placeholder")
    if a.empty or b.empty:
        return _na("parity_placeholder" if placeholder else "parity_no_losses_logged")
    common = a.index.intersection(b.index)
    if not len(common):
        return _na("parity_no_common_steps")
    diff = (a[common] - b[common]).abs()
    rel = diff / a[common].abs().clip(lower=1e-12)
    bad = rel[rel > rtol]
    return Parity(
        status="DIVERGED" if len(bad) else "MATCH",
        first_diverging_step=int(bad.index[0]) if len(bad) else None,
        steps_compared=int(len(common)), max_abs_diff=float(diff.max()),
        max_rel_diff=float(rel.max()), rtol=rtol,
        curve=[{"step": int(s), "baseline": float(a[s]), "variant": float(b[s]),
                "abs_diff": float(diff[s])} for s in common])


def sequential_design(auto: AutoDesign, with_budget: bool = True) -> SequentialDesign:
    """The :class:`afbench.verdict.SequentialDesign` of a plan's ``repeats=auto`` settings (the
    time budget left out with ``with_budget=False``: offline there is no clock to hold it
    against)."""
    return SequentialDesign(level=auto.level, min_pairs=auto.min_pairs, max_pairs=auto.max_pairs,
                            precision_pct=auto.precision_pct,
                            time_budget_s=auto.time_budget_s if with_budget else None,
                            min_gain_pct=auto.min_gain_pct)


def run_contention(result: Any, run_id: str) -> tuple[bool, Message | None]:
    """Whether a run was measured contended, and why: the reasons of
    :func:`afbench.analysis.contention.judge_reasons` of ``result.json``'s ``contention``
    record as the message ``run_reason`` (``<run_id>: <reason>; <reason>``, each reason a
    ``cont_reason_*`` message with its numbers, worded by the report); ``(False, None)`` when
    not measured or nothing crossed a threshold."""
    contended, reasons = judge_reasons(getattr(result, "contention", None))
    if not reasons:
        return bool(contended), None
    return bool(contended), say("run_reason", run=run_id, reason=[
        say(code, **values).model_dump() for code, values in reasons])


@dataclass
class VerdictPairs:
    """The verdict's input for one variant: per round, the measured step times (seconds) of
    the baseline's and the variant's verdict-phase runs, and each run's measured contention."""

    baseline: list[list[float]]
    variant: list[list[float]]
    contended: list[tuple[bool, bool]]
    detail: list[list[dict[str, Any]]]  # per pair: run_reason messages (JSON), maybe none
    ids: list[tuple[str, str]] = field(default_factory=list)  # per pair: (baseline, variant) run


def verdict_pairs(plan: Plan, variant: str, steps: dict[str, list[float]],
                  results: dict[str, Any] | None = None, contention: bool = True
                  ) -> VerdictPairs:
    """The baseline's and ``variant``'s verdict-phase runs paired by round (the runs of one
    round ran adjacently), in round order; a round where either run has no entry in ``steps``
    (run_id -> step times) is left out. ``results`` (run_id -> result.json) gives contention;
    ``contention=False`` (report.contention=keep) passes every run as uncontended."""
    by_repeat: dict[int, dict[str, str]] = {}
    for r in plan.runs:
        if r.phase == plan.verdict_phase and r.variant in (plan.baseline, variant):
            by_repeat.setdefault(r.repeat, {})[r.variant] = r.run_id
    out = VerdictPairs([], [], [], [])
    for repeat in sorted(by_repeat):
        ids = by_repeat[repeat]
        b_id, v_id = ids.get(plan.baseline), ids.get(variant)
        if b_id in steps and v_id in steps:
            (cb, db), (cv, dv) = (run_contention((results or {}).get(i), i) if contention
                                  else (False, None) for i in (b_id, v_id))
            out.baseline.append(steps[b_id])
            out.variant.append(steps[v_id])
            out.contended.append((cb, cv))
            out.detail.append([d.model_dump() for d in (db, dv) if d])
            out.ids.append((b_id, v_id))
    return out


def _auto_speed(plan: Plan, variant: str, pairs: VerdictPairs) -> Any:
    """The sequential verdict at the loop's last look, replayed from the stored runs and design:
    the recorded stop reason (``interrupted`` when none was recorded). A time-budget stop gets
    the final analysis that spends the error left; before the first look (the loop ended
    early), no boundary was spent yet and the fixed-n paired t at the full level is the honest
    interval."""
    assert plan.auto is not None  # repeats == "auto" plans carry their design
    design = sequential_design(plan.auto, with_budget=False)
    stop = plan.auto_stops.get(variant)
    n = min(len(pairs.baseline), stop.n_pairs if stop else len(pairs.baseline))
    reason = stop.reason if stop else INTERRUPTED
    test = SequentialTest(design, pairs.baseline[:n], pairs.variant[:n], pairs.contended[:n],
                          pairs.detail[:n])
    speed = test.speed(reason)
    if speed.ci_low_pct is None and speed.n_pairs >= 2:
        fixed = compare_runs(pairs.baseline[:n], pairs.variant[:n], confidence=design.level,
                             min_gain_pct=design.min_gain_pct, contended=pairs.contended[:n],
                             contention_detail=pairs.detail[:n])
        speed = replace(fixed, design=SEQUENTIAL, stop_reason=reason)
    return speed


def speed_of(col: Collected, variant: str, report: ReportConfig) -> Speed:
    """The verdict on ``variant``'s speed from the stored runs (``col.window_steps``), by
    :mod:`afbench.verdict` at the plan's design: ``repeats=auto``: the sequential verdict at the
    last look (:func:`_auto_speed`); otherwise :func:`afbench.verdict.compare_runs`, with the
    host calibration the experiment recorded (``experiment.json``'s ``calibration``) and each
    run's measured contention. One round carries the reference's quick verdict beside it.
    Callers handle failed and skipped sides first (no pair, no Speed)."""
    plan = col.plan
    pairs = verdict_pairs(plan, variant, col.window_steps, col.results,
                          contention=report.contention == "set_aside")
    if not pairs.baseline:
        return Speed(level=report.confidence, decision=INCONCLUSIVE, no_interval_reason="no_pairs_left")
    if plan.repeats == "auto" and plan.auto is not None:
        return Speed.of(_auto_speed(plan, variant, pairs))
    calibration = col.experiment.calibration_dict()
    speed = compare_runs(pairs.baseline, pairs.variant, confidence=report.confidence,
                         min_gain_pct=report.min_gain_pct, contended=pairs.contended,
                         contention_detail=pairs.detail,
                         calibration=RunSpread.of(calibration) if calibration else None)
    beside: dict[str, Any] = {}
    if speed.spread_source and "calibration" in speed.spread_source:
        beside["calibration"] = calibration
    if speed.design == ONE_ROUND:
        mb, mv = finite_mean(pairs.baseline[0]), finite_mean(pairs.variant[0])
        beside.update(reference_verdict=quick_verdict(variant, mb, mv, failed=False),
                      reference_gain_pct=gain_pct(mb, mv))
    return Speed.of(speed, **beside)


def _generations(run_dir) -> list[dict[str, Any]]:
    path = run_dir / "generations.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def generation_parity(out_dir, baseline_ids: list[str], variant_ids: list[str], rtol: float) -> Parity:
    """Greedy tokens of the first measured run, baseline vs variant, prompt by prompt: MATCH
    when identical, else DIVERGED with the first diverging prompt/position and both texts.
    Logits (first prompt, every generated position up to the first divergence): max abs
    difference, MATCH when <= rtol x max |baseline logit| (rtol per dtype: one bf16 ulp passes)."""
    if not baseline_ids or not variant_ids:
        return _na("parity_no_runs")
    b_dir, v_dir = out_dir / "runs" / baseline_ids[0], out_dir / "runs" / variant_ids[0]
    gb, gv = _generations(b_dir), _generations(v_dir)
    if not gb or not gv:
        return _na("parity_no_generations")
    out: dict[str, Any] = {"prompts_compared": min(len(gb), len(gv)), "rtol": rtol}
    first_div = None
    for a, b in zip(gb, gv):
        ta, tb = a["token_ids"], b["token_ids"]
        if ta != tb:
            pos = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
            first_div = {"prompt_index": a["prompt_index"], "position": pos,
                         "baseline_text": a["text"], "variant_text": b["text"]}
            break
    lb, lv = b_dir / "logits.safetensors", v_dir / "logits.safetensors"
    if lb.is_file() and lv.is_file():
        # safetensors only for inference comparisons that stored logits
        from safetensors.numpy import load_file

        xa, xb = load_file(str(lb))["logits"], load_file(str(lv))["logits"]
        n = min(len(xa), len(xb))
        if first_div is not None and first_div["prompt_index"] == gb[0]["prompt_index"]:
            n = min(n, first_div["position"] + 1)
        if n:
            diff = float(abs(xa[:n] - xb[:n]).max())
            scale = float(abs(xa[:n]).max()) or 1.0
            out.update(logits_positions=n, max_abs_logit_diff=diff,
                       logit_tolerance=rtol * scale, logits_match=diff <= rtol * scale)
    if first_div is not None:
        out.update(status="DIVERGED", first_diverging_position=first_div["position"],
                   first_divergence=first_div)
    elif out.get("logits_match") is False:
        message = say("parity_logits_differ")
        out.update(status="DIVERGED", first_diverging_position=0, reason=message.text,
                   reason_msg=message)
    else:
        out.update(status="MATCH")
    return Parity.model_validate(out)


def _status_of(runs: pd.DataFrame, ids: list[str]) -> list[str]:
    return runs[runs.run_id.isin(ids)].status.tolist()


def run_ids(col: Collected, variant: str, phase: str | None) -> list[str]:
    """Run ids of one variant and phase, in repeat order."""
    return [r.run_id for r in col.plan.runs if r.variant == variant and r.phase == phase]


def side(col: Collected, variant: str, phase: str | None, workload: str) -> Side:
    """``variant``'s numbers on ``phase`` from the runs table: means over its repeats (a mean
    step time only when every run is OK), the worst repeat's step-time CV, the means of the
    ``workload``'s window metrics (:data:`afbench.collect.MEANS`), the first run's inference
    sanity, its memory and efficiency (:func:`memory_of`, :func:`efficiency_of`) and the first
    recompile caveat of its runs."""
    runs = col.runs
    sel = runs[runs.run_id.isin(run_ids(col, variant, phase))]
    statuses = sel.status.tolist()
    errors = [e for e in sel.log_error.tolist() if e]
    sanity = [x for x in sel.get("sanity", pd.Series(dtype=object)).tolist() if isinstance(x, str)]
    per_repeat = [x for x in sel.mean_step_s.tolist() if x is not None and x == x]
    cvs = [x for x in sel.get("step_cv_pct", pd.Series(dtype=float)).tolist() if x is not None and x == x]
    return Side(
        name=variant, statuses=statuses, log_errors=errors, repeats_s=per_repeat,
        mean_step_s=finite_mean(sel.mean_step_s.tolist()) if (sel.status == "OK").all() else None,
        **first_step(sel),
        step_cv_pct=max(cvs) if cvs else None, tokens_per_s=finite_mean(sel.tokens_per_s.tolist()),
        metrics={k: finite_mean(sel[k].tolist()) for k in MEANS[workload] if k in sel},
        sanity=sanity[0] if sanity else None,
        memory=memory_of(_ok_results(col, sel)), efficiency=efficiency_of(_ok_results(col, sel)),
        recompile=next((x for x in sel.get("recompile", pd.Series(dtype=object)).tolist()
                        if isinstance(x, str) and x), None),
        recompile_after_step=next((int(x) for x in sel.get("recompile_after_step",
                                                            pd.Series(dtype=object)).tolist()
                                   if x is not None and x == x), None),
        skipped=bool(statuses) and all(s == "SKIPPED" for s in statuses),
        ok=bool(statuses) and all(s == "OK" for s in statuses) and not errors)


def first_step(sel: pd.DataFrame) -> dict[str, Any]:
    """``first_step_s`` (mean, s) and ``first_step_kernel_cache`` of the runs ``sel``: over
    the runs whose compiler caches were cold when they started where there are any (a first
    compile, as a user meets it), else over all of them, marked "warm" when every run found
    kernels an earlier run of the experiment had built (launch.local.compiler_cache_dirs)."""
    if "first_step_s" not in sel:
        return {"first_step_s": None, "first_step_kernel_cache": None}
    states = sel.kernel_cache.tolist() if "kernel_cache" in sel else [None] * len(sel)
    cold = [t for t, k in zip(sel.first_step_s.tolist(), states) if k == "cold"]
    if cold:
        return {"first_step_s": finite_mean(cold), "first_step_kernel_cache": "cold"}
    warm = bool(states) and all(k == "warm" for k in states)
    return {"first_step_s": finite_mean(sel.first_step_s.tolist()),
            "first_step_kernel_cache": "warm" if warm else None}


def _ok_results(col: Collected, sel: pd.DataFrame) -> list[RunResult]:
    """The result.json of each OK run of ``sel`` (rows of the runs table), in repeat order."""
    return [r for rid, st in zip(sel.run_id, sel.status)
            if st == "OK" and (r := col.results.get(rid)) is not None]


def _first(values) -> object:
    return next((v for v in values if v is not None), None)


def memory_of(results: list[RunResult]) -> Memory:
    """A side's :class:`Memory` from its verdict-phase runs' result.json: each peak the max
    over the repeats (GiB), the headline peak of the first kind of :data:`MEMORY_MEASURES`
    measured, the first run's source, window and KV-cache size."""
    peaks = {key: max((x for r in results if (x := getattr(r.memory, key)) is not None),
                      default=None) for key, _ in MEMORY_MEASURES}
    measure = next((name for key, name in MEMORY_MEASURES if peaks[key] is not None), None)
    key = dict((name, k) for k, name in MEMORY_MEASURES).get(measure or "")
    return Memory(
        peak_gib=peaks[key] if key else None, measure=measure,
        peak_reserved_gib=peaks["peak_reserved_gib"],
        peak_allocated_gib=peaks["peak_allocated_gib"], peak_rss_gib=peaks["peak_rss_gib"],
        source=_first(r.memory.source for r in results),
        window=_first(r.memory.window for r in results),
        **{f: _first(getattr(r.memory, f) for r in results)
           for f in ("kv_cache_gib", "kv_cache_tokens", "kv_cache_batch", "kv_cache_source")})


def efficiency_of(results: list[RunResult]) -> Efficiency:
    """A side's :class:`Efficiency`: TFLOPs per device and MFU (%) as means over its runs,
    the peak, FLOPs per token and sources of the first run that has them."""
    runs = [r.efficiency for r in results]
    return Efficiency(
        tflops_per_device=finite_mean(e.tflops_per_device for e in runs),
        mfu_pct=finite_mean(e.mfu_pct for e in runs),
        peak_tflops=_first(e.peak_tflops for e in runs),
        peak_source=_first(e.peak_source for e in runs),
        source=_first(e.source for e in runs),
        flops_per_token=_first(e.flops_per_token for e in runs),
        flops_params=_first(e.flops_params for e in runs),
        afbench_tflops_per_device=finite_mean(e.afbench_tflops_per_device for e in runs),
        afbench_mfu_pct=finite_mean(e.afbench_mfu_pct for e in runs),
        afbench_source=_first(e.afbench_source for e in runs))


def memory_change(b: Side, v: Side, warn_pct: float) -> MemoryChange:
    """The variant's peak memory against the baseline's, on the first kind of
    :data:`MEMORY_MEASURES` both sides measured; ``warn`` when it rises more than
    ``warn_pct`` percent."""
    measure = next((name for _, name in MEMORY_MEASURES
                    if b.memory.of(name) is not None and v.memory.of(name) is not None), None)
    if measure is None:
        return MemoryChange(warn_pct=warn_pct)
    base, var = b.memory.of(measure), v.memory.of(measure)
    pct = (var - base) / base * 100.0 if base > 0 else None
    return MemoryChange(measure=measure, baseline_gib=base, variant_gib=var,
                        delta_gib=var - base, delta_pct=pct, warn_pct=warn_pct,
                        warn=pct is not None and pct > warn_pct)


def caveats_of(b: Side, v: Side, memory: MemoryChange) -> list[Message]:
    """What the verdict line carries beside the verdict, as catalog messages (their ``text``
    is the English): a memory rise above ``report.memory_warn_pct``, and each side's
    recompile inside its measured window."""
    out = []
    if memory.warn:
        out.append(say("caveat_memory", measure=memory.measure, delta_pct=memory.delta_pct,
                       delta_gib=memory.delta_gib, baseline=b.name, warn_pct=memory.warn_pct))
    for x in (v, b):
        if x.recompile and x.recompile_after_step is not None:
            out.append(say("caveat_recompile", variant=x.name, step=x.recompile_after_step))
        elif x.recompile:  # a summary written before the step was kept
            out.append(Message(key="", text=f"{x.name} {x.recompile}"))
    return out


def compile_cost(b: Side, v: Side, speed: Speed, compiled: bool = True) -> Compile:
    """Compile overhead (variant's time to first step - its mean step time, s) and the steps
    its per-step saving over the baseline needs to pay that back (None without a saving).
    Empty for a variant that compiles nothing (``compiled`` False: no autofuse, no graph
    mode), whose first step is no compile and whose "break-even" would be noise."""
    if not compiled:
        return Compile()
    kernel_cache = v.first_step_kernel_cache
    overhead = (v.first_step_s - v.mean_step_s
                if v.first_step_s is not None and v.mean_step_s else None)
    # the per-step saving is the verdict's own gain (of the run medians) applied to the
    # baseline's step time, so break-even and verdict never disagree in sign when one
    # loaded run moves the means
    saving = (b.mean_step_s * speed.gain_pct / 100.0
              if speed.gain_pct is not None and b.mean_step_s else None)
    return Compile(overhead_s=overhead, kernel_cache=kernel_cache, break_even_steps=(
        overhead / saving if overhead is not None and saving and saving > 0 else None))


def failure_reasons(col: Collected, ids: list[str]) -> list[Message]:
    """Why a side has no number: the reasons of its runs that did not succeed, then the
    strict-parse errors of its logs, each as the message ``run_reason`` (English text
    ``run_id: reason``; a reason afbench recorded itself, such as a skip, is a nested catalog
    message, any other is kept as written)."""
    pair = col.runs[col.runs.run_id.isin(ids)]
    found = [(r.run_id, r.reason) for r in pair.itertuples() if r.status != "OK" and r.reason]
    found += [(r.run_id, r.log_error) for r in pair.itertuples() if r.log_error]
    return [say("run_reason", run=run, reason=recorded(text) or text) for run, text in found]


def parity_of(col: Collected, b: Side, v: Side, phase: str | None, workload: str,
              rtol: float) -> Parity:
    """Loss parity (training) or generation parity (inference) of the first runs of a pair."""
    if not (b.ok and v.ok):
        return _na("parity_pair_failed")
    b_ids, v_ids = run_ids(col, b.name, phase), run_ids(col, v.name, phase)
    if workload == "infer":
        return generation_parity(col.out_dir, b_ids, v_ids, rtol)
    return loss_parity(col.steps, b_ids, v_ids, rtol)


def compare_pair(col: Collected, b: Side, variant: str, report: ReportConfig, rtol: float,
                 aa: bool) -> Comparison:
    """One variant against the baseline side ``b`` on the verdict phase."""
    phase, workload = col.plan.verdict_phase, workload_of(col)
    v = side(col, variant, phase, workload)
    interrupted = _interrupted(col, run_ids(col, variant, phase) + run_ids(col, b.name, phase))
    if (v.skipped and b.ok) or (interrupted and "FAILED" not in b.statuses + v.statuses):
        # a run stopped by Ctrl-C (or SIGTERM) is SKIPPED, interrupted: nothing failed
        verdict, speed = SKIPPED, Speed(level=report.confidence,
                                        stop_reason=INTERRUPTED if interrupted else None)
    elif not (b.ok and v.ok and b.repeats_s and v.repeats_s):
        verdict, speed = RUN_FAILED, Speed(level=report.confidence,
                                           stop_reason=_stop_reason(col.plan, variant))
    else:
        speed = speed_of(col, variant, report)
        verdict = verdict_word(speed.decision or INCONCLUSIVE, variant)
    parity = parity_of(col, b, v, phase, workload, rtol)
    memory = memory_change(b, v, report.memory_warn_pct)
    caveat_msgs = caveats_of(b, v, memory)
    if report.contention == "keep" and speed.ci_low_pct is not None:
        # the measured-contended runs whose pairs decided (not set aside as outliers)
        measured = verdict_pairs(col.plan, variant, col.window_steps, col.results)
        aside = {a.pair for a in speed.set_aside}
        kept = [i for k, (ids, flags) in enumerate(zip(measured.ids, measured.contended), 1)
                if k not in aside for i, f in zip(ids, flags) if f]
        if kept:
            caveat_msgs.append(say("caveat_contention_kept", runs=", ".join(kept)))
    caveats = [m.text for m in caveat_msgs]
    reasons = failure_reasons(col, run_ids(col, variant, phase) + run_ids(col, b.name, phase))
    return Comparison(
        baseline=b, variant=v, phase=phase, workload=workload, verdict=verdict,
        verdict_line="",  # worded by the report (templates/verdict_words.j2: fill_lines)
        speed=speed, parity=parity, compile=compile_cost(b, v, speed, _compiles(col, variant)),
        memory=memory,
        caveats=caveats, caveat_msgs=caveat_msgs, aa=aa, reasons=[m.text for m in reasons],
        reason_msgs=reasons)


def switch_records(plan: Plan, run_id: str, result: RunResult) -> list[SwitchRecord]:
    """What each switch did in one run: the engine's reports, then every switch the run's
    config turns on that the engine did not report (``applied`` None, no detail: the command
    engine cannot see inside its program), so that the report lists every requested switch."""
    spec = next((r for r in plan.runs if r.run_id == run_id), None)
    records = list(result.switches)
    if spec is not None:
        records += [SwitchRecord(name=name) for name in
                    requested_not_reported(spec.config, [sw.name for sw in records])]
    return records


def _interrupted(col: Collected, ids: list[str]) -> bool:
    """Whether a run of ``ids`` was stopped by the user (SKIPPED with the interrupt reason)."""
    sel = col.runs[col.runs.run_id.isin(ids)]
    return bool(((sel.status == "SKIPPED") & (sel.reason == RUNSPEC_INTERRUPTED)).any())


def _compiles(col: Collected, variant: str) -> bool:
    """Whether ``variant``'s verdict-phase runs compile the model (a switch that compiles)."""
    specs = [r for r in col.plan.runs if r.variant == variant and r.phase == col.plan.verdict_phase]
    return any(compiles(r.config) for r in specs)


def _stop_reason(plan: Plan, variant: str) -> str | None:
    stop = plan.auto_stops.get(variant)
    return stop.reason if stop else None


def workload_of(col: Collected) -> str:
    """The workload (``sft`` | ``infer``) of the baseline's verdict-phase run."""
    plan = col.plan
    spec = next(r for r in plan.runs if r.variant == plan.baseline and r.phase == plan.verdict_phase)
    return spec.config.scheduler.workload


def comparisons(col: Collected, report: ReportConfig) -> list[Comparison]:
    """One :class:`Comparison` per non-baseline variant, in plan order."""
    plan = col.plan
    spec = next(r for r in plan.runs if r.variant == plan.baseline and r.phase == plan.verdict_phase)
    rtol = getattr(report.parity, f"rtol_{spec.config.model.dtype}")
    variants_cfg = col.experiment.variants
    b = side(col, plan.baseline, plan.verdict_phase, workload_of(col))
    return [compare_pair(col, b, variant, report, rtol,
                         aa=variants_cfg.get(variant) == variants_cfg.get(plan.baseline))
            for variant in plan.variants if variant != plan.baseline]


def kernel_tables(col: Collected) -> dict[str, pd.DataFrame]:
    """Variant -> normalised kernel table of its first profile run (variants with one only)."""
    tables = {}
    for variant in col.plan.variants:
        rid = run_ids(col, variant, col.plan.profile_phase)[0]
        sel = col.kernels[col.kernels.run_id == rid]
        if len(sel):
            tables[variant] = sel.drop(columns="run_id").reset_index(drop=True)
    return tables


def profiling_pair(col: Collected, variant: str, expected: list[int]) -> ProfilingComparison:
    """Profiling status of the first profile runs of ``variant`` and the baseline."""
    base, pphase = col.plan.baseline, col.plan.profile_phase
    b_id, v_id = run_ids(col, base, pphase)[0], run_ids(col, variant, pphase)[0]
    res = profiling_status(col.out_dir / "runs" / b_id / "profile",
                           col.out_dir / "runs" / v_id / "profile", expected,
                           baseline_failed=_status_of(col.runs, [b_id]) != ["OK"],
                           variant_failed=_status_of(col.runs, [v_id]) != ["OK"])
    phases = ([] if res.means is None else
              [{"phase": ph, "baseline_us": float(row["baseline"]), "variant_us": float(row["variant"])}
               for ph, row in res.means.iterrows()])
    labels, labels_msg = profiler_labels(col, b_id)
    return ProfilingComparison(variant=variant, baseline=base, phase=pphase, status=res.status,
                               reason=res.reason, reason_msg=profiling_reason(res),
                               phases=phases,
                               device_ids={k: str(v) for k, v in res.device_ids.items()},
                               profiler_steps=expected, step_labels=labels,
                               labels_msg=labels_msg)


def profiling_reason(res: ProfilingResult) -> Message:
    """:attr:`ProfilingResult.reason` as a catalog message, clause by clause (the sides named
    in the report's language, a parser's own message kept as written)."""
    ids = res.device_ids
    clauses = []
    for side, code, detail in res.parts:
        who = say(side) if side else None
        if code == "devices":
            clauses.append(say("profiling_devices", baseline=ids["baseline"], variant=ids["variant"]))
        elif code == "ok":
            clauses.append(say("profiling_ok", steps=detail, device=ids["baseline"]))
        else:
            clauses.append(say(f"profiling_{code}", side=who, detail=detail))
    return say("clauses", items=clauses)


def profiler_labels(col: Collected, run_id: str) -> tuple[list[int], Message | None]:
    """The ``ProfilerStep#N`` labels of the trace of the profile run ``run_id`` (sorted), and
    the sentence saying which training steps they are: torch.profiler's label counts its own
    steps from 0, so with ``prof.step()`` after every step the profiler window's training
    steps ``first..last`` carry the labels ``first-1..last-1``
    (:func:`afbench.analysis.traces.training_steps_of` with the window's schedule). Labels
    that do not fit the window (the run's own profiler had another schedule) get a sentence
    saying so. ``([], None)`` without a run that succeeded, a trace, or labels in it."""
    if _status_of(col.runs, [run_id]) != ["OK"]:
        return [], None
    profile = col.out_dir / "runs" / run_id / "profile"
    trace = T.find_trace(profile)
    if trace is None:
        return [], None
    try:
        labels = T.profiler_step_labels(trace)
    except (OSError, ValueError):
        return [], None  # the kernel tables report an unreadable trace
    if not labels:
        return [], None
    window = col.spec(run_id).config.optimization.profiler_window
    schedule = {"wait": window.first_step - 1 - window.warmup_steps,
                "warmup": window.warmup_steps, "active": len(window.steps)}
    training = T.training_steps_of(len(labels), schedule)
    args = dict(trace=str(trace.relative_to(col.out_dir)), first_label=labels[0],
                last_label=labels[-1], first_step=window.first_step, last_step=window.last_step,
                **schedule)
    if labels == [t - 1 for t in training]:  # the schedule's steps, labelled one off
        return labels, say("profiler_labels", **{**args, "first_step": training[0],
                                                 "last_step": training[-1]})
    return labels, say("profiler_labels_other", expected_first=window.first_step - 1,
                       expected_last=window.last_step - 1, **args)


def step_device_time(out_dir, run_id: str) -> StepDeviceTime | None:
    """Device time per profiled step from the ``kernel_details.csv`` files below the profile
    run ``run_id``'s ``profile/`` (one per profiled rank;
    :func:`afbench.analysis.kernels.kernel_details_per_step`), or the note ``per-step
    breakdown unavailable: ...`` (naming the file relative to ``out_dir``) when one has no
    ``Step Id`` column or does not parse; None without any ``kernel_details.csv`` (the report
    then says so once for the whole profile phase)."""
    shown = f"runs/{run_id}/profile"
    paths = K.find_kernel_details(out_dir / shown)
    if not paths:
        return None
    rows: list[dict[str, Any]] = []
    for path in paths:
        where = f"{shown}/{path.relative_to(out_dir / shown)}"
        try:
            found = K.kernel_details_per_step(path)
        except (OSError, ValueError) as exc:
            note = say("step_time_error", file=where,
                       error=str(exc).removeprefix(str(path) + ": "))
            return StepDeviceTime(note=note.text, note_msg=note)
        if found.table is None:
            note = say("step_time_no_step_id", file=where)
            return StepDeviceTime(note=note.text, note_msg=note)
        rows += found.table.to_dict("records")
    return StepDeviceTime.model_validate({"rows": rows})


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts; a missing cell (NaN, which a float column keeps even after
    ``where(notna, None)``) is ``None``."""
    return [{k: None if isinstance(v, float) and v != v else v for k, v in row.items()}
            for row in df.to_dict("records")]


def _run_rows(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """The runs table's rows for the summary, a recompile note as a catalog message too."""
    rows = _records(runs.where(runs.notna(), None))
    for row in rows:
        step = row.get("recompile_after_step")
        if row.get("recompile") and step is not None:
            row["recompile_after_step"] = int(step)
            row["recompile_msg"] = say("run_recompile", step=int(step))
    return rows


def compare(col: Collected, report: ReportConfig) -> Summary:
    """Build the summary: one comparison per non-baseline variant on the verdict phase, one
    profiling status per variant on the profile phase, kernel tables, parameters, runs."""
    plan = col.plan
    base = plan.baseline
    comps = comparisons(col, report)
    profiling: list[ProfilingComparison] = []
    kernels: dict[str, list[KernelRow]] = {}
    kernel_diffs: dict[str, list[KernelDiffRow]] = {}
    kernel_notes: dict[str, Message] = {}
    fused_evidence: dict[str, FusedEvidence] = {}
    per_step: dict[str, StepDeviceTime] = {}
    if plan.profile_phase is not None:
        spec = next(r for r in plan.runs if r.variant == base and r.phase == plan.profile_phase)
        # profiler step ids are 0-based (docs/reference.md §1)
        expected = [s - 1 for s in spec.config.optimization.profiler_window.steps]
        tables = kernel_tables(col)
        kernels = {v: _records(K.top_n(t, report.top_n_kernels)) for v, t in tables.items()}
        for variant in plan.variants:
            rid = run_ids(col, variant, plan.profile_phase)[0]
            found = step_device_time(col.out_dir, rid) if _status_of(col.runs, [rid]) == ["OK"] else None
            if found is not None:
                per_step[variant] = found
        for variant in plan.variants:
            if variant == base:
                continue
            profiling.append(profiling_pair(col, variant, expected))
            if base in tables and variant in tables:
                diff = K.diff_kernel_tables(tables[base], tables[variant])
                kernel_diffs[variant] = _records(diff.head(report.top_n_kernels))
                found = uniform_slowdown(_records(diff), baseline=base, variant=variant)
                if found:
                    kernel_notes[variant] = say("uniform_slowdown_note", **found)
                fused_evidence[variant] = K.rmsnorm_evidence(tables[base], tables[variant])

    results = {rid: r for rid, r in col.results.items() if r is not None}
    env = next(iter(results.values()), None)
    return Summary.model_validate({
        "experiment": plan.experiment, "out_dir": str(col.out_dir),
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "created_at": col.experiment.created_at, "baseline": base,
        "verdict_phase": plan.verdict_phase, "profile_phase": plan.profile_phase,
        "repeats": plan.repeats, "skip_policy": plan.skip_policy,
        "variants": {name: _dotted(over) for name, over in
                     col.experiment.variants.items()},
        "assets": col.experiment.assets,
        "environment": env.model_dump(include=set(Environment.model_fields),
                                      exclude_none=True) if env else {},
        "parameters": _parameters(col),
        "runs": _run_rows(col.runs),
        "switches": {rid: switch_records(col.plan, rid, r) for rid, r in results.items()},
        "ranks": {rid: r.ranks for rid, r in results.items() if r.ranks},
        "comparisons": comps, "profiling": profiling, "kernels": kernels,
        "kernel_diffs": kernel_diffs, "kernel_notes": kernel_notes,
        "fused_evidence": fused_evidence,
        "step_device_time": per_step,
        # one round per variant, and something to compare (a single variant has no verdict)
        "caveat": CAVEAT if plan.repeats == 1 and len(plan.variants) > 1 else "",
        "headline": [],  # worded by the report (templates/verdict_words.j2: fill_lines)
    })


def _dotted(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` for display."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict) and value:
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _parameters(col: Collected) -> list[PhaseParameters]:
    """Per phase: the run parameters of the baseline's run (the variants differ only by their
    overrides, listed beside)."""
    out = []
    for phase in col.plan.phases:
        spec = next(r for r in col.plan.runs if r.phase == phase and r.variant == col.plan.baseline)
        c = spec.config
        # only the keys the run's spec holds: a key added later (scheduler.optimizer_impl) is
        # not shown with today's default for a directory written before it existed
        s = c.scheduler.model_dump(exclude_unset=True)
        s.pop("workload", None)
        out.append(PhaseParameters(
            phase=phase, workload=c.scheduler.workload, model=c.model.name, dtype=c.model.dtype,
            data=c.data.name, world_size=c.parallel.world_size, backend=c.backend.name,
            scheduler=s, profiler=(c.optimization.profiler_window.model_dump()
                                   if c.optimization.profiler else None)))
    return out
