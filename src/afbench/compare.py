"""Compare every variant with the baseline: verdicts, gains, parity, compile cost, profiling
status, kernel tables. Pure functions over :class:`afbench.collect.Collected`; the result is
the plain dict written as ``summary.json`` and handed to the report templates."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from afbench.analysis import kernels as K
from afbench.analysis.steptrace import profiling_status
from afbench.analysis.verdict import RUN_FAILED, SKIPPED, gain_pct, quick_verdict
from afbench.collect import Collected
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
    a = steps[steps.run_id == baseline_ids[0]].set_index("step")["loss"]
    b = steps[steps.run_id == variant_ids[0]].set_index("step")["loss"]
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
    dtype = base_spec.config.model.dtype
    rtol = getattr(report.parity, f"rtol_{dtype}")

    def side(variant: str) -> dict[str, Any]:
        sel = runs[runs.run_id.isin(ids(variant, vphase))]
        statuses = sel.status.tolist()
        mean = _mean(sel.mean_step_s.tolist()) if (sel.status == "OK").all() else None
        first = _mean(sel.first_step_s.tolist()) if "first_step_s" in sel else None
        errors = [e for e in sel.log_error.tolist() if e]
        return {"statuses": statuses, "mean_step_s": mean, "first_step_s": first,
                "tokens_per_s": _mean(sel.tokens_per_s.tolist()), "log_errors": errors,
                "skipped": bool(statuses) and all(s == "SKIPPED" for s in statuses),
                "ok": bool(statuses) and all(s == "OK" for s in statuses) and not errors}

    b = side(base)
    comparisons = []
    for variant in plan.variants:
        if variant == base:
            continue
        v = side(variant)
        if v["skipped"] and b["ok"]:
            verdict = SKIPPED
        else:
            verdict = quick_verdict(variant, b["mean_step_s"], v["mean_step_s"],
                                    failed=not (b["ok"] and v["ok"]))
        gain = (gain_pct(b["mean_step_s"], v["mean_step_s"])
                if verdict not in (RUN_FAILED, SKIPPED) else None)
        parity = loss_parity(col.steps, ids(base, vphase), ids(variant, vphase), rtol)
        compile_s = (v["first_step_s"] - v["mean_step_s"]
                     if v["first_step_s"] is not None and v["mean_step_s"] else None)
        saving = (b["mean_step_s"] - v["mean_step_s"]) if gain is not None else None
        break_even = (compile_s / saving if compile_s is not None and saving and saving > 0 else None)
        reasons = [r for r in runs[runs.run_id.isin(ids(variant, vphase) + ids(base, vphase))]
                   .reason.tolist() if r] + b["log_errors"] + v["log_errors"]
        line = verdict
        if parity["status"] == "DIVERGED" and verdict.endswith("_FASTER"):
            line += f" (but loss parity DIVERGED at step {parity['first_diverging_step']})"
        comparisons.append({
            "variant": variant, "baseline": base, "phase": vphase, "verdict": verdict,
            "verdict_line": line, "baseline_mean_s": b["mean_step_s"], "variant_mean_s": v["mean_step_s"],
            "gain_pct": gain, "baseline_tokens_per_s": b["tokens_per_s"],
            "variant_tokens_per_s": v["tokens_per_s"], "baseline_first_step_s": b["first_step_s"],
            "variant_first_step_s": v["first_step_s"], "compile_overhead_s": compile_s,
            "break_even_steps": break_even, "parity": parity, "reasons": reasons,
        })

    profiling = []
    kernels: dict[str, list[dict[str, Any]]] = {}
    kernel_diffs: dict[str, list[dict[str, Any]]] = {}
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
        "comparisons": comparisons, "profiling": profiling, "kernels": kernels,
        "kernel_diffs": kernel_diffs, "caveat": CAVEAT if plan.repeats == 1 else "",
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
