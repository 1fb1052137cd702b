"""Compare every variant with the baseline: verdicts, gains, parity, compile cost, profiling
status, kernel tables. Pure functions over :class:`afbench.collect.Collected`; the result is
the plain dict written as ``summary.json`` and handed to the report templates."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from afbench.analysis import kernels as K
from afbench.analysis.steptrace import profiling_status
from afbench.analysis.stats import t_interval_of_gain
from afbench.analysis.verdict import (NO_GAIN, RUN_FAILED, SKIPPED, gain_pct, quick_verdict,
                                      verdict_label)
from afbench.collect import MEANS, Collected
from afbench.config.models import ReportConfig

CAVEAT = ("One quick round per variant is directional evidence, not a formal multi-round result: "
          "use experiment.repeats >= 3 for a confidence interval.")


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def loss_parity(steps: pd.DataFrame, baseline_ids: list[str], variant_ids: list[str],
                rtol: float) -> dict[str, Any]:
    """Per-step loss of baseline vs variant (first repeat of each): MATCH when every step's
    |Δloss| <= rtol x |baseline loss|, else DIVERGED (first diverging step named); N/A when a
    side has no losses."""
    if steps.empty or not baseline_ids or not variant_ids or "loss" not in steps:
        return {"status": "N/A", "reason": "no per-step losses"}
    a = steps[steps.run_id == baseline_ids[0]].set_index("step")["loss"].dropna()
    b = steps[steps.run_id == variant_ids[0]].set_index("step")["loss"].dropna()
    if a.empty or b.empty:
        return {"status": "N/A", "reason": "no per-step losses logged"}
    common = a.index.intersection(b.index)
    if not len(common):
        return {"status": "N/A", "reason": "no common steps"}
    diff = (a[common] - b[common]).abs()
    rel = diff / a[common].abs().clip(lower=1e-12)
    bad = rel[rel > rtol]
    out = {"steps_compared": int(len(common)), "max_abs_diff": float(diff.max()),
           "max_rel_diff": float(rel.max()), "rtol": rtol,
           "curve": [{"step": int(s), "baseline": float(a[s]), "variant": float(b[s]),
                      "abs_diff": float(diff[s])} for s in common]}
    if len(bad):
        out.update(status="DIVERGED", first_diverging_step=int(bad.index[0]))
    else:
        out.update(status="MATCH")
    return out


def decide(variant: str, baseline_s: list[float], variant_s: list[float], failed: bool,
           skipped: bool, level: float) -> dict[str, Any]:
    """Verdict of a variant against the baseline from per-repeat mean step times (seconds).

    One value per side: the reference's quick verdict (``<VARIANT>_FASTER`` if the gain > 0),
    labelled as a single round. Two or more: Welch-t interval of the gain at ``level``;
    ``<VARIANT>_FASTER`` only when the whole interval is above zero, else ``NO_GAIN`` with the
    interval shown. ``RUN_FAILED`` / ``SKIPPED`` when a side has no valid number.
    """
    out: dict[str, Any] = {"gain_pct": None, "ci_low": None, "ci_high": None, "note": "",
                           "kind": "none"}
    if skipped:
        return {**out, "verdict": SKIPPED}
    if failed or not baseline_s or not variant_s:
        return {**out, "verdict": RUN_FAILED}
    mb, mv = sum(baseline_s) / len(baseline_s), sum(variant_s) / len(variant_s)
    if len(baseline_s) >= 2 and len(variant_s) >= 2:
        gain, lo, hi = t_interval_of_gain(baseline_s, variant_s, level)
        verdict = verdict_label(variant) if lo > 0 else NO_GAIN
        note = f" ({level:.0%} interval of the gain [{lo:+.2f}%, {hi:+.2f}%]"
        note += ", slower)" if hi < 0 else ")"
        return {**out, "verdict": verdict, "gain_pct": gain, "ci_low": lo, "ci_high": hi,
                "note": note, "kind": "interval"}
    verdict = quick_verdict(variant, mb, mv, failed=False)
    return {**out, "verdict": verdict, "gain_pct": gain_pct(mb, mv),
            "note": " (quick verdict: one round)", "kind": "quick"}


def _generations(run_dir) -> list[dict[str, Any]]:
    path = run_dir / "generations.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def generation_parity(out_dir, baseline_ids: list[str], variant_ids: list[str], rtol: float) -> dict[str, Any]:
    """Greedy tokens of the first measured run, baseline vs variant, prompt by prompt: MATCH
    when identical, else DIVERGED with the first diverging prompt/position and both texts.
    Logits (first prompt, every generated position up to the first divergence): max abs
    difference, MATCH when <= rtol x max |baseline logit| (rtol per dtype: one bf16 ulp passes)."""
    if not baseline_ids or not variant_ids:
        return {"status": "N/A", "reason": "no runs"}
    b_dir, v_dir = out_dir / "runs" / baseline_ids[0], out_dir / "runs" / variant_ids[0]
    gb, gv = _generations(b_dir), _generations(v_dir)
    if not gb or not gv:
        return {"status": "N/A", "reason": "no generations.jsonl on one side"}
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
        out.update(status="DIVERGED", first_diverging_position=0,
                   reason="tokens identical but logits differ beyond tolerance")
    else:
        out.update(status="MATCH")
    return out


def _status_of(runs: pd.DataFrame, ids: list[str]) -> list[str]:
    return runs[runs.run_id.isin(ids)].status.tolist()


def compare(col: Collected, report: ReportConfig) -> dict[str, Any]:
    """Build the summary: one comparison per non-baseline variant on the verdict phase, one
    profiling status per variant on the profile phase, kernel tables, parameters, runs."""
    plan, runs = col.plan, col.runs
    base = plan.baseline
    vphase = plan.verdict_phase

    def ids(variant: str, phase: str | None) -> list[str]:
        return [r.run_id for r in plan.runs if r.variant == variant and r.phase == phase]

    base_spec = next(r for r in plan.runs if r.variant == base and r.phase == vphase)
    workload = base_spec.config.scheduler.workload
    dtype = base_spec.config.model.dtype
    rtol = getattr(report.parity, f"rtol_{dtype}")

    def side(variant: str) -> dict[str, Any]:
        sel = runs[runs.run_id.isin(ids(variant, vphase))]
        statuses = sel.status.tolist()
        mean = _mean(sel.mean_step_s.tolist()) if (sel.status == "OK").all() else None
        first = _mean(sel.first_step_s.tolist()) if "first_step_s" in sel else None
        errors = [e for e in sel.log_error.tolist() if e]
        extra = {k: _mean(sel[k].tolist()) for k in MEANS[workload] if k in sel}
        sanity = [x for x in sel.get("sanity", pd.Series(dtype=object)).tolist() if isinstance(x, str)]
        per_repeat = [x for x in sel.mean_step_s.tolist() if x is not None and x == x]
        cvs = [x for x in sel.get("step_cv_pct", pd.Series(dtype=float)).tolist() if x is not None and x == x]
        return {"statuses": statuses, "mean_step_s": mean, "first_step_s": first,
                "per_repeat_s": per_repeat, "step_cv_pct": max(cvs) if cvs else None,
                "tokens_per_s": _mean(sel.tokens_per_s.tolist()), "log_errors": errors,
                "metrics": extra, "sanity": sanity[0] if sanity else None,
                "skipped": bool(statuses) and all(s == "SKIPPED" for s in statuses),
                "ok": bool(statuses) and all(s == "OK" for s in statuses) and not errors}

    variants_cfg = col.experiment.get("config", {}).get("experiment", {}).get("variants", {})
    b = side(base)
    comparisons = []
    for variant in plan.variants:
        if variant == base:
            continue
        v = side(variant)
        decision = decide(variant, b["per_repeat_s"], v["per_repeat_s"],
                          failed=not (b["ok"] and v["ok"]), skipped=v["skipped"] and b["ok"],
                          level=report.confidence)
        verdict, gain = decision["verdict"], decision["gain_pct"]
        if not (b["ok"] and v["ok"]):
            parity = {"status": "N/A", "reason": "a run of the pair did not succeed"}
        elif workload == "infer":
            parity = generation_parity(col.out_dir, ids(base, vphase), ids(variant, vphase), rtol)
        else:
            parity = loss_parity(col.steps, ids(base, vphase), ids(variant, vphase), rtol)
        compile_s = (v["first_step_s"] - v["mean_step_s"]
                     if v["first_step_s"] is not None and v["mean_step_s"] else None)
        saving = (b["mean_step_s"] - v["mean_step_s"]) if gain is not None else None
        break_even = (compile_s / saving if compile_s is not None and saving and saving > 0 else None)
        # why a side has no number: its runs that did not succeed, and invalid logs
        pair = runs[runs.run_id.isin(ids(variant, vphase) + ids(base, vphase))]
        reasons = [f"{r.run_id}: {r.reason}" for r in pair.itertuples()
                   if r.status != "OK" and r.reason]
        reasons += [f"{r.run_id}: {r.log_error}" for r in pair.itertuples() if r.log_error]
        line = verdict + decision["note"]
        if parity["status"] == "DIVERGED" and verdict.endswith("_FASTER"):
            where = parity.get("first_diverging_step", parity.get("first_diverging_position"))
            line += f" (but parity DIVERGED at {'step' if workload == 'sft' else 'token'} {where})"
        comparisons.append({
            "variant": variant, "baseline": base, "phase": vphase, "verdict": verdict,
            "verdict_line": line, "baseline_mean_s": b["mean_step_s"], "variant_mean_s": v["mean_step_s"],
            "gain_pct": gain, "gain_ci_low": decision["ci_low"], "gain_ci_high": decision["ci_high"],
            "verdict_kind": decision["kind"], "confidence": report.confidence,
            "aa": variants_cfg.get(variant) == variants_cfg.get(base),
            "baseline_repeats_s": b["per_repeat_s"], "variant_repeats_s": v["per_repeat_s"],
            "baseline_step_cv_pct": b["step_cv_pct"], "variant_step_cv_pct": v["step_cv_pct"],
            "baseline_tokens_per_s": b["tokens_per_s"],
            "variant_tokens_per_s": v["tokens_per_s"], "baseline_first_step_s": b["first_step_s"],
            "variant_first_step_s": v["first_step_s"], "compile_overhead_s": compile_s,
            "break_even_steps": break_even, "parity": parity, "reasons": reasons,
            "workload": workload, "baseline_metrics": b["metrics"], "variant_metrics": v["metrics"],
            "baseline_sanity": b["sanity"], "variant_sanity": v["sanity"],
        })

    profiling = []
    kernels: dict[str, list[dict[str, Any]]] = {}
    kernel_diffs: dict[str, list[dict[str, Any]]] = {}
    fused_evidence: dict[str, dict[str, Any]] = {}
    pphase = plan.profile_phase
    if pphase is not None:
        spec = next(r for r in plan.runs if r.variant == base and r.phase == pphase)
        win = spec.config.optimization.profiler_window
        expected = [s - 1 for s in win.steps]  # profiler step ids are 0-based (REFERENCE §1)
        tables = {}
        for variant in plan.variants:
            rid = ids(variant, pphase)[0]
            sel = col.kernels[col.kernels.run_id == rid]
            if len(sel):
                tables[variant] = sel.drop(columns="run_id").reset_index(drop=True)
                kernels[variant] = K.top_n(tables[variant], report.top_n_kernels).to_dict("records")
        for variant in plan.variants:
            if variant == base:
                continue
            b_id, v_id = ids(base, pphase)[0], ids(variant, pphase)[0]
            b_ok = _status_of(runs, [b_id]) == ["OK"]
            v_ok = _status_of(runs, [v_id]) == ["OK"]
            res = profiling_status(col.out_dir / "runs" / b_id / "profile",
                                   col.out_dir / "runs" / v_id / "profile", expected,
                                   baseline_failed=not b_ok, variant_failed=not v_ok)
            phases = []
            if res.means is not None:
                for ph, row in res.means.iterrows():
                    phases.append({"phase": ph, "baseline_us": float(row["baseline"]),
                                   "variant_us": float(row["variant"])})
            profiling.append({"variant": variant, "baseline": base, "phase": pphase,
                              "status": res.status, "reason": res.reason, "phases": phases,
                              "device_ids": {k: str(v) for k, v in res.device_ids.items()},
                              "profiler_steps": expected})
            if base in tables and variant in tables:
                diff = K.diff_kernel_tables(tables[base], tables[variant])
                kernel_diffs[variant] = diff.head(report.top_n_kernels).to_dict("records")
                fused_evidence[variant] = K.rmsnorm_evidence(tables[base], tables[variant])

    env = next((r for r in col.results.values() if r), {})
    params = _parameters(col)
    headline = [f"{c['variant']} vs {c['baseline']}: {c['verdict_line']}"
                + (f", gain {c['gain_pct']:+.2f}%" if c["gain_pct"] is not None else "")
                for c in comparisons]
    headline += [f"profiling {p['variant']}: {p['status']}" for p in profiling]
    return {
        "experiment": plan.experiment, "out_dir": str(col.out_dir),
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "created_at": col.experiment.get("created_at"), "baseline": base,
        "verdict_phase": vphase, "profile_phase": pphase, "repeats": plan.repeats,
        "skip_policy": plan.skip_policy,
        "variants": {name: _dotted(over) for name, over in
                     col.experiment.get("config", {}).get("experiment", {}).get("variants", {}).items()},
        "assets": col.experiment.get("assets", {}),
        "environment": {k: env.get(k) for k in ("python", "platform", "backend", "device",
                                                "torch_threads", "versions", "params")},
        "parameters": params,
        "runs": col.runs.where(col.runs.notna(), None).to_dict("records"),
        "switches": {rid: r.get("switches", []) for rid, r in col.results.items() if r},
        "ranks": {rid: r["ranks"] for rid, r in col.results.items() if r and r.get("ranks")},
        "comparisons": comparisons, "profiling": profiling, "kernels": kernels,
        "kernel_diffs": kernel_diffs, "fused_evidence": fused_evidence,
        "caveat": CAVEAT if plan.repeats == 1 else "",
        "headline": headline,
    }


def _dotted(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` for display."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict) and value:
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _parameters(col: Collected) -> list[dict[str, Any]]:
    """Per phase: the run parameters of the baseline's run (the variants differ only by their
    overrides, listed beside)."""
    out = []
    for phase in col.plan.phases:
        spec = next(r for r in col.plan.runs if r.phase == phase and r.variant == col.plan.baseline)
        c = spec.config
        s = c.scheduler.model_dump()
        s.pop("workload", None)
        out.append({"phase": phase, "workload": c.scheduler.workload, "model": c.model.name,
                    "dtype": c.model.dtype, "data": c.data.name, "world_size": c.parallel.world_size,
                    "backend": c.backend.name, "scheduler": s,
                    "profiler": (c.optimization.profiler_window.model_dump()
                                 if c.optimization.profiler else None)})
    return out
