"""The host calibration's store: this host's run-to-run spread per kind of run, kept in the
history database (the ``calibration`` table of :mod:`afbench.history.schema`).

The statistics are :mod:`afbench.verdict.calibration`'s; this module keeps them. A row per
(host id, run kind) holds the estimates recorded for that kind (``data.estimates``, the newest
:data:`KEEP`): an A/A calibration (``python -m afbench experiment=calibrate_host``) and the
residual spread of every multi-round experiment. The calibration of a kind is their pooled
variance (:func:`afbench.verdict.calibration.pool`), so a host that changes ages its old
estimates out. ``spread_pct`` and ``n`` of the row repeat the pooled figure for SQL readers.

The **run kind** is what a run-to-run spread depends on: the resolved backend (a GPU's spread
is not a CPU's), the engine (a user command is not afbench's loop), the workload and model,
the sequence length and global batch size (or, for inference, the tokens generated, the batch
size and the prompts), the number of measured steps (the run statistic is the median of the
window: a longer window moves less), the world size and TP size when above 1, the thread
count when set (``backend.num_threads``), the switches
that are on (``|sw:autofuse``; none: no suffix), and for a user command or an external trainer
(or any run given ``launcher.env``) a digest of that program (``|p:1a2b3c4d``: two commands
are two programs). On a 2-core CPU one experiment's compiled runs spread 6% and its eager runs
2.5%, and A/As of the two kinds measured 2.48% and 3.68% (bench/README.md §10); a calibration
of one kind assumed for another makes one round confidently wrong (16.7% A/A false positives when
the variant's runs are twice as spread: bench/README.md §8). A **comparison** of two kinds has
its own key (:func:`pair_key`): what its multi-round runs learn, the spread of their pairs, is
kept there; without one, the two kinds' own calibrations combine
(:func:`afbench.verdict.combine`: the pair's variance is ``s_b^2 + s_v^2``). Only a
calibration of one kind describes one variant's runs (:func:`of_one_kind`). The **host** is the
history's host id (:func:`afbench.history.provenance.host_id`: host name, CPU model,
accelerator and driver). An experiment writes the calibration it used into its
``experiment.json`` (``calibration``), so an offline re-render decides as the run did.

A database that cannot be opened or written is a warning and no calibration, never a failed
experiment.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from afbench.config.secrets import masked
from afbench.runspec import Plan, RunSpec
from afbench.switches.registry import switch_names
from afbench.verdict.calibration import (
    MIN_CALIBRATION_PAIRS,
    RunLocation,
    RunSpread,
    combined_record,
    location_record,
    one_kind,
    pool,
)

log = logging.getLogger(__name__)

#: Estimates kept per kind (the newest): the pooled spread follows the host as it changes.
KEEP = 20
AA = "aa"
RESIDUALS = "residuals"
#: The ``run_kind`` column's width (schema.py): a longer key keeps its head and a hash.
KEY_CHARS = 100


def _fit(key: str) -> str:
    if len(key) <= KEY_CHARS:
        return key
    return f"{key[: KEY_CHARS - 14]}|h{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def run_kind(spec: RunSpec) -> str:
    """The kind of run a spread belongs to (module docstring), e.g.
    ``cpu|builtin|sft|qwen3_tiny|seq256|gbs4|window5``."""
    c = spec.config
    s = c.scheduler
    backend = spec.backend or c.backend.name
    if s.workload == "sft":
        window = s.measure.last_step - s.measure.first_step + 1
        shape = f"seq{s.seq_len}|gbs{s.global_batch_size}|window{window}"
    else:
        shape = (
            f"tok{s.max_new_tokens}|bs{s.batch_size}|prompts{s.num_prompts}|window{s.measured_runs}"
        )
    on = "+".join(n for n in switch_names() if getattr(c.optimization, n, False))
    p = c.parallel
    if p.world_size > 1 or p.tp_size > 1:  # one process is not a group of them
        shape += f"|ws{p.world_size}|tp{p.tp_size}"
    if c.backend.num_threads is not None:  # the threads a CPU run computes with
        shape += f"|thr{c.backend.num_threads}"
    return _fit(
        f"{backend}|{c.engine.name}|{s.workload}|{c.model.name}|{shape}"
        + (f"|sw:{on}" if on else "")
        + _program(c, spec.env)
    )


#: Engine settings that do not change the program that runs (how its log is read, where).
_NOT_PROGRAM = frozenset({"name", "step_pattern", "log_pattern", "dump_folder_name"})
#: Settings of the model, scheduler and data that the kind names in words, or that do not
#: change what a step computes (where the files are, the learning rate, the seed): the rest
#: (dtype, attention kernel, micro-batch, optimizer, KV cache, packing, compile settings...)
#: names the program when set away from its default.
_NAMED_OR_NOT_PROGRAM = frozenset(
    {
        "name",
        "path",
        "manifest",
        "workload",
        "steps",
        "seq_len",
        "global_batch_size",
        "measure",
        "seed",
        "lr",
        "weight_decay",
        "max_new_tokens",
        "batch_size",
        "num_prompts",
        "warmup_runs",
        "measured_runs",
        "max_samples",
        "prompts_file",
    }
)


def _settings(section: Any) -> dict[str, Any]:
    """A section's program settings set away from their defaults (named ones left out)."""
    return {
        k: v
        for k, v in section.model_dump(exclude_defaults=True).items()
        if k not in _NAMED_OR_NOT_PROGRAM
    }


def _loop_settings(c: Any) -> dict[str, dict[str, Any]]:
    """The builtin loop's program settings away from their defaults, by section."""
    loop = {
        name: got
        for name, section in (("model", c.model), ("scheduler", c.scheduler), ("data", c.data))
        if (got := _settings(section))
    }
    compile_ = c.optimization.compile.model_dump(exclude_defaults=True)
    if compile_:
        loop["compile"] = compile_
    return loop


def program_note(spec: RunSpec) -> str:
    """What a kind's ``|p:`` digest stands for, in override words (``model.dtype=bfloat16``,
    ``engine settings``, ``launcher.env``); '' when it has none."""
    c = spec.config
    words = [
        f"{'optimization.' if name == 'compile' else ''}{name}.{k}={v}"
        for name, got in _loop_settings(c).items()
        for k, v in got.items()
    ]
    if any(k not in _NOT_PROGRAM for k in c.engine.model_dump()):
        words.append(f"engine={c.engine.name} settings")
    if spec.env:
        words.append("launcher.env")
    return ", ".join(words)


def _program(c: Any, env: dict[str, str]) -> str:
    """``|p:<digest>`` of what else names the program a run is: a user command's or an external
    trainer's settings (two commands are two programs, whose spreads need not agree), the
    environment every run gets (``launcher.env``), and the builtin loop's settings away from
    their defaults (a bfloat16 variant of a float32 run is another program: its spread and step
    time are its own); '' for the builtin loop at its defaults without an environment."""
    engine = {k: v for k, v in c.engine.model_dump().items() if k not in _NOT_PROGRAM}
    loop = _loop_settings(c)
    if not engine and not env and not loop:
        return ""
    # secrets as the stored files hold them (masked): a kind read back from a plan.json is the
    # kind the run had, and a token is no part of the program
    text = json.dumps(masked({"engine": engine, "env": env, **loop}), sort_keys=True, default=str)
    return f"|p:{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def pair_key(baseline_kind: str, variant_kind: str) -> str:
    """The key of a comparison of two kinds, e.g. ``cpu|...|window5|vs:autofuse`` (the
    variant's switches when only they differ; else a hash of the variant's kind)."""
    base_b, _, _ = baseline_kind.partition("|sw:")
    base_v, _, sw_v = variant_kind.partition("|sw:")
    other = (
        (sw_v or "-")
        if base_b == base_v
        else "h" + hashlib.sha1(variant_kind.encode()).hexdigest()[:10]
    )
    return _fit(f"{baseline_kind}|vs:{other}")


#: How a comparison's calibration names its kind: :func:`pair_key`'s ``|vs:``, or the
#: ``" + "`` of :func:`afbench.verdict.calibration.combined_record`.
_COMPARISON_MARKS = ("|vs:", " + ")


def of_one_kind(calibration: dict[str, Any] | None) -> bool:
    """Whether a stored calibration (``experiment.json``'s) is of one kind of run, and so
    describes one variant's runs, not a comparison's pair of two kinds."""
    kind = str((calibration or {}).get("kind") or "")
    return bool(calibration) and not any(m in kind for m in _COMPARISON_MARKS)


def _host() -> str:
    from afbench.history.provenance import host_fingerprint

    return host_fingerprint()["host_id"]


def _estimates(url: str | None, kind: str) -> tuple[Any, str, list[dict[str, Any]]] | None:
    """(engine, host id, the stored estimates of ``kind``), or None with a warning when the
    database cannot be opened."""
    from afbench.history.db import HistoryError, open_db, read_calibration

    try:
        engine = open_db(url)
        host = _host()
        row = read_calibration(engine, host, kind)
    except HistoryError as exc:
        if not getattr(exc, "repeated", False):  # a silent server is named once
            log.warning("afbench: host calibration unavailable: %s", exc)
        return None
    return engine, host, list(((row or {}).get("data") or {}).get("estimates", []))


def _pooled(kind: str, host: str, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    try:
        spread = pool(RunSpread.of(e) for e in entries[-KEEP:])
    except (KeyError, TypeError, ValueError) as exc:  # a hand-edited row: no calibration
        log.warning(
            "afbench: host calibration for %s unreadable (%s: %s); recalibrate "
            "(python -m afbench experiment=calibrate_host)",
            kind,
            type(exc).__name__,
            exc,
        )
        return None
    if spread is None:
        return None
    return {
        "kind": kind,
        "host_id": host,
        "spread_pct": spread.spread_pct,
        "df": spread.df,
        "n_pairs": spread.n_pairs,
        "n_outlier_pairs": spread.n_outlier_pairs,
        "n_experiments": spread.n_experiments,
        "updated_at": max(e["recorded_at"] for e in entries[-KEEP:]),
        "baseline_runs": location_record(spread.baseline_runs),
        "variant_runs": location_record(spread.variant_runs),
    }


def lookup_many(kinds: Iterable[str], url: str | None = None) -> dict[str, dict[str, Any] | None]:
    """:func:`lookup` of several kinds through one connection (an experiment's start reads
    its variants' kinds and comparisons at once); every kind ``None`` (and one warning) when
    the database cannot be opened."""
    from afbench.history.db import HistoryError, open_db, read_calibration

    kinds = list(dict.fromkeys(kinds))
    try:
        engine = open_db(url)
    except HistoryError as exc:
        if not getattr(exc, "repeated", False):  # a silent server is named once
            log.warning("afbench: host calibration unavailable: %s", exc)
        return dict.fromkeys(kinds)
    try:
        host = _host()
        rows = {k: read_calibration(engine, host, k) for k in kinds}
    finally:
        engine.dispose()
    return {
        k: _pooled(k, host, list(((row or {}).get("data") or {}).get("estimates", [])))
        for k, row in rows.items()
    }


def lookup(kind: str, url: str | None = None) -> dict[str, Any] | None:
    """This host's calibration of ``kind``: ``{"kind", "host_id", "spread_pct", "df",
    "n_pairs", "n_outlier_pairs", "n_experiments", "updated_at", "baseline_runs",
    "variant_runs"}`` (the last two: what the newest estimate's runs took,
    :class:`afbench.verdict.RunLocation` as a dict, or ``None``), or ``None``."""
    return lookup_many([kind], url)[kind]


def record(
    kind: str,
    spread: RunSpread,
    source: str,
    how: str,
    url: str | None = None,
    experiment: str | None = None,
) -> RunSpread | None:
    """Add one estimate of ``kind``'s spread on this host (``how``: ``aa`` or ``residuals``;
    ``source``: the output directory, ``experiment`` its name; recorded once per source, each
    shown by ``python -m afbench.history calibration show KIND``). Returns the pooled
    calibration of ``kind`` now, or None (and warns) when the database cannot be written."""
    from sqlalchemy.exc import SQLAlchemyError

    from afbench.history.db import record_calibration

    found = _estimates(url, kind)
    if found is None:
        return None
    engine, host, entries = found
    if any(e.get("source") == source for e in entries):  # a re-render records nothing twice
        engine.dispose()
        return pool(RunSpread.of(e) for e in entries[-KEEP:])
    entries.append(
        {
            "spread_pct": spread.spread_pct,
            "df": spread.df,
            "n_pairs": spread.n_pairs,
            "n_experiments": spread.n_experiments,
            "n_outlier_pairs": spread.n_outlier_pairs,
            "baseline_runs": location_record(spread.baseline_runs),
            "variant_runs": location_record(spread.variant_runs),
            "how": how,
            "source": source,
            "experiment": experiment,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    )
    entries = entries[-KEEP:]
    pooled = pool(RunSpread.of(e) for e in entries)
    try:
        record_calibration(
            engine,
            host,
            kind,
            pooled.spread_pct,
            pooled.n_pairs,
            {"estimates": entries, "df": pooled.df},
        )
    except SQLAlchemyError as exc:
        log.warning("afbench: host calibration not recorded: %s", str(exc).splitlines()[0])
        return None
    finally:
        engine.dispose()
    return pooled


def for_comparison(
    baseline_kind: str,
    variant_kind: str,
    url: str | None = None,
    found: dict[str, dict[str, Any] | None] | None = None,
) -> dict[str, Any] | None:
    """The calibration a comparison of two kinds decides one round with, as :func:`lookup`
    returns it (``kind`` says which): the kind's own when both sides are of one kind; else the
    comparison's (:func:`pair_key`, learnt from its multi-round runs) or the two kinds' own
    combined (:func:`afbench.verdict.combine`), whichever is fit for one round (the first
    when neither is); ``None`` when there is neither. ``found``: the calibrations already
    read (:func:`lookup_many` of :func:`comparison_keys`), else they are read here."""
    keys = comparison_keys(baseline_kind, variant_kind)
    if found is None:
        found = lookup_many(keys, url)
    if variant_kind == baseline_kind:  # one kind, one program: its own, both sides checked
        own = found[baseline_kind]
        return combined_record(own, own) if own else None
    b, v = found[baseline_kind], found[variant_kind]
    candidates = [c for c in (found[keys[2]], combined_record(b, v) if b and v else None) if c]
    return next(
        (c for c in candidates if RunSpread.of(c).usable_for_one_round),
        candidates[0] if candidates else None,
    )


def comparison_keys(baseline_kind: str, variant_kind: str) -> list[str]:
    """The keys :func:`for_comparison` reads: both kinds and, when they differ, the pair's."""
    if variant_kind == baseline_kind:
        return [baseline_kind]
    return [baseline_kind, variant_kind, pair_key(baseline_kind, variant_kind)]


def verdict_kinds(plan: Plan) -> dict[str, str]:
    """Each variant's run kind in the verdict phase (its first run there)."""
    kinds: dict[str, str] = {}
    for r in plan.runs:
        if r.phase == plan.verdict_phase and r.variant not in kinds:
            kinds[r.variant] = run_kind(r)
    return kinds


def shortfall(
    baseline_kind: str, variant_kind: str, found: dict[str, dict[str, Any] | None]
) -> list[str]:
    """Why a comparison's calibrations (``found``: :func:`lookup_many` of
    :func:`comparison_keys`) cannot decide one round, one phrase per kind that is short
    (``"<kind>: 11 pairs, 1 more needed"``, ``"<kind>: 1 outlier pair"``, ``"<kind>: none"``);
    empty when one of them can (the comparison's own, or both kinds')."""
    keys = comparison_keys(baseline_kind, variant_kind)
    own = found.get(keys[-1]) if len(keys) == 3 else None

    def fit(c: dict[str, Any] | None) -> bool:
        return bool(c) and RunSpread.of(c).usable_for_one_round

    if fit(own) or all(fit(found.get(k)) for k in keys[:2]):
        return []
    out = []
    for kind in dict.fromkeys(keys[:2]):
        c = found.get(kind)
        if c is None:
            out.append(f"{kind}: none")
        elif (n := int(c["n_pairs"])) < MIN_CALIBRATION_PAIRS:
            out.append(f"{kind}: {n} rounds, {MIN_CALIBRATION_PAIRS - n} more needed")
        elif c.get("n_outlier_pairs"):
            out.append(f"{kind}: {c['n_outlier_pairs']} round(s) with an outlier run seen")
    return out


def for_plan(plan: Plan, url: str | None = None) -> tuple[dict[str, str], dict | None]:
    """The plan's variants' run kinds, and the calibration its verdicts decide one round with:
    for one comparison, :func:`for_comparison`'s; for several, the widest of theirs (one
    ``experiment.json`` calibration serves every comparison, so it must not be narrower than
    any of them), or ``None`` when one of them has none. Logs one line saying which (or that
    one round will not decide without one)."""
    kinds = verdict_kinds(plan)
    base = kinds.get(plan.baseline)
    others = [v for v in plan.variants if v != plan.baseline and v in kinds]
    if base is None:
        return kinds, None
    read = lookup_many([k for v in others for k in comparison_keys(base, kinds[v])] or [base], url)
    found = [for_comparison(base, kinds[v], found=read) for v in others] if others else [read[base]]
    chosen = None if any(f is None for f in found) else max(found, key=lambda f: f["spread_pct"])
    if chosen and len({kinds[v] for v in others}) > 1:  # its variant's runs are one of several
        chosen = {**chosen, "variant_runs": None}
    if chosen:
        log.info(
            "afbench: host calibration for %s: run-to-run spread %.2f%% on %d rounds (updated %s)",
            chosen["kind"],
            chosen["spread_pct"],
            chosen["n_pairs"],
            chosen["updated_at"],
        )
        short = sorted({line for v in others for line in shortfall(base, kinds[v], read)})
        if plan.rounds == 1 and short:
            log.info(
                "afbench: that calibration cannot decide one round (it needs %d rounds and "
                "no outlier run, from each kind's calibration or the comparison's own "
                "rounds): %s. Run experiment=%s again for the kind that is short (%s; its "
                "rounds add to what it has), or use verdict.rounds=5",
                MIN_CALIBRATION_PAIRS,
                "; ".join(short),
                *_advice(plan, kinds.values()),
            )
    elif plan.rounds == 1 and others:
        missing = sorted({kinds[v] for v, f in zip(others, found) if f is None})
        specs = {kinds[r.variant]: r for r in plan.runs if r.phase == plan.verdict_phase}
        named = [
            f"{k} ({note})" if "|p:" in k and (note := program_note(specs[k])) else k
            for k in (missing or [base])
        ]
        log.info(
            "afbench: no host calibration for %s: a one-round verdict will be INCONCLUSIVE "
            "(calibrate each kind once: python -m afbench experiment=%s with the same "
            "model, engine, window, switches and settings (%s, or the settings named in "
            "brackets); or use verdict.rounds=5, which needs none and teaches this "
            "comparison its spread)",
            ", ".join(named),
            *_advice(plan, missing or [base]),
        )
    return kinds, chosen


def _advice(plan: Plan, kinds: Iterable[str]) -> tuple[str, str]:
    """(the calibration recipe of ``plan``'s workload, the switches ``kinds`` turn on as
    ``optimization.<name>=true``, or "as it is" for kinds without one): derived from the
    plan and its kinds, so every recipe's advice fits it."""
    from afbench.plan import calibration_recipe

    on = sorted(
        {
            f"optimization.{n}=true"
            for k in kinds
            for n in k.partition("|sw:")[2].split("|")[0].split("+")
            if n
        }
    )
    recipe = calibration_recipe(plan.runs[0].config.scheduler.workload if plan.runs else "sft")
    return recipe, "once as it is and once with " + " ".join(on) if on else "as it is"


def learn(summary: Any, kinds: dict[str, str], out_dir: Path, url: str | None = None) -> None:
    """Record this experiment's run-to-run spread: each comparison with 2 or more deciding
    pairs (on their own spread) adds its pairs' spread (``s_d / sqrt(2)``) to its key: the
    kind's own when both sides are of one kind (``aa`` when the variant is the baseline's
    twin), else the comparison's (:func:`pair_key`). One estimate per key and experiment (the
    comparisons share their baseline runs). Each estimate keeps what its runs took
    (:class:`afbench.verdict.RunLocation`, from the comparison's ``*_location_s``): each
    side's for a comparison of two kinds; for one kind (one program), one location resting on
    both sides' runs. A comparison whose deciding runs include one measured as contended
    (verdict.contention=keep) teaches nothing: a calibration holds clean runs only."""
    done: set[str] = set()
    contended = {r.run_id for r in summary.runs if r.contended}
    for c in summary.comparisons:
        sp = c.speed
        kb, kv = kinds.get(c.baseline.name), kinds.get(c.variant.name)
        if kb is None or kv is None:
            continue
        if busy := sorted(contended & {*c.baseline.runs_used, *c.variant.runs_used}):
            log.info(
                "afbench: host calibration not learned from %s vs %s: %s measured as "
                "contended (a calibration holds clean runs only)",
                c.variant.name,
                c.baseline.name,
                ", ".join(busy),
            )
            continue
        key = kb if kv == kb else pair_key(kb, kv)
        if key in done or not (
            sp.spread_source == "pairs" and (sp.n_pairs or 0) >= 2 and sp.spread_pct
        ):
            continue
        done.add(key)
        outliers = sum(1 for a in sp.set_aside if a.reason == "outlier")
        sigma, df = sp.spread_pct / 2**0.5, sp.n_pairs - 1
        where = [
            RunLocation(step_s=t, n_runs=sp.n_pairs, spread_pct=sigma, df=df) if t else None
            for t in (sp.baseline_location_s, sp.variant_location_s)
        ]
        spread = RunSpread(
            spread_pct=sigma,
            df=df,
            n_pairs=sp.n_pairs,
            n_outlier_pairs=outliers,
            baseline_runs=where[0],
            variant_runs=where[1],
        )
        if kv == kb:  # one kind, one program: its location rests on both sides' runs
            spread = one_kind(spread)
        pooled = record(
            key, spread, str(out_dir), AA if c.aa else RESIDUALS, url, summary.experiment
        )
        if pooled is not None:
            log.info(
                "afbench: host calibration for %s learned %.2f%% on %d rounds from this "
                "experiment; it now rests on %d rounds%s",
                key,
                spread.spread_pct,
                spread.n_pairs,
                pooled.n_pairs,
                ""
                if pooled.usable_for_one_round
                else f" (one round needs {MIN_CALIBRATION_PAIRS} rounds and no outlier "
                "run: run the same experiment again, its rounds add to these)"
                if not pooled.n_outlier_pairs
                else f" (one round needs {MIN_CALIBRATION_PAIRS} rounds and no outlier run; "
                f"{pooled.n_outlier_pairs} round(s) held one: this host makes outlier "
                "runs, so decide with verdict.rounds=5 or auto)",
            )
