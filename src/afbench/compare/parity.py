"""Loss and generation parity of a variant against the baseline: per-step losses with a dtype-aware
tolerance (training), generated tokens (inference). Part of :mod:`afbench.compare`."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from afbench.analysis.steplog import is_placeholder_loss
from afbench.collect import Collected
from afbench.compare.sides import run_ids
from afbench.messages import say
from afbench.store import Parity, Side

#: Loss parity when a side's logged rank printed the ``loss: -1`` placeholder (pipeline
#: parallelism; :data:`afbench.analysis.steplog.PLACEHOLDER_LOSS`), on any engine.
PLACEHOLDER_LOSS_REASON = say("parity_placeholder").text


def _na(key: str, **args: Any) -> Parity:
    """Parity N/A with the catalog reason ``key`` (labels.yaml), in English and as a message."""
    message = say(key, **args)
    return Parity(status="N/A", reason=message.text, reason_msg=message)


def loss_parity(
    steps: pd.DataFrame, baseline_ids: list[str], variant_ids: list[str], rtol: float
) -> Parity:
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
        steps_compared=int(len(common)),
        max_abs_diff=float(diff.max()),
        max_rel_diff=float(rel.max()),
        rtol=rtol,
        curve=[
            {
                "step": int(s),
                "baseline": float(a[s]),
                "variant": float(b[s]),
                "abs_diff": float(diff[s]),
            }
            for s in common
        ],
    )


def _generations(run_dir) -> list[dict[str, Any]]:
    path = run_dir / "generations.jsonl"
    if not path.is_file():
        return []
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def generation_parity(
    out_dir, baseline_ids: list[str], variant_ids: list[str], rtol: float
) -> Parity:
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
            first_div = {
                "prompt_index": a["prompt_index"],
                "position": pos,
                "baseline_text": a["text"],
                "variant_text": b["text"],
            }
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
            out.update(
                logits_positions=n,
                max_abs_logit_diff=diff,
                logit_tolerance=rtol * scale,
                logits_match=diff <= rtol * scale,
            )
    if first_div is not None:
        out.update(
            status="DIVERGED",
            first_diverging_position=first_div["position"],
            first_divergence=first_div,
        )
    elif out.get("logits_match") is False:
        message = say("parity_logits_differ")
        out.update(
            status="DIVERGED", first_diverging_position=0, reason=message.text, reason_msg=message
        )
    else:
        out.update(status="MATCH")
    return Parity.model_validate(out)


def parity_of(
    col: Collected, b: Side, v: Side, phase: str | None, workload: str, rtol: float
) -> Parity:
    """Loss parity (training) or generation parity (inference) of the first runs of a pair."""
    if not (b.ok and v.ok):
        return _na("parity_pair_failed")
    b_ids, v_ids = run_ids(col, b.name, phase), run_ids(col, v.name, phase)
    if workload == "infer":
        return generation_parity(col.out_dir, b_ids, v_ids, rtol)
    return loss_parity(col.steps, b_ids, v_ids, rtol)
