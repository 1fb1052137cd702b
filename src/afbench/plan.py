"""Expand an experiment into RunSpecs: variant x phase x round, each with its own config.

Order: phase by phase; within a phase, round by round (r1, r2, ...), each round one run of
every variant, so slow drift of the machine hits every variant alike. Within a round
(``experiment.order``): ``counterbalanced`` (the default) alternates the direction, r1: base,
A, B; r2: B, A, base; r3: base, A, B ..., so each baseline run is adjacent to a variant run and
a linear drift cancels over two rounds (docs/statistics.md §1); ``interleaved`` keeps base, A, B
in every round (the reference's order); ``random`` draws each round's order from
``experiment.order_seed`` (recorded in plan.json). Round 1 always starts with the baseline, so
the reference's rule "the first run fails -> the rest is skipped" still holds.

Rounds repeat the verdict phase only: ``verdict.rounds=N`` runs it N times and every
other phase (e.g. profile, whose report reads its first run) once, in the listed order of
phases. ``verdict.rounds=auto``: the verdict phase runs first, with ``verdict.min_rounds``
rounds; the adaptive loop (afbench.experiment) appends rounds with :func:`add_round`; every
other phase runs once, after it.

The effective config of a run is the composed config, then the phase's dotted overrides, then
the variant's (the variant wins: it is what is being compared).
"""

from __future__ import annotations

import difflib
import random
import secrets
from pathlib import Path
from typing import Any

from afbench.backends.resolve import resolve_backend
from afbench.config.models import AfbenchConfig, RunConfig
from afbench.config.short import short_run
from afbench.config.validate import (
    apply_overrides,
    check_unknown_keys,
    expand_dotted,
    validate_run_config,
)
from afbench.engines.registry import engine_for
from afbench.errors import ConfigError
from afbench.launch.devices import assign_devices
from afbench.messages import Message, say
from afbench.runspec import AutoDesign, Plan, RunSpec, config_hash
from afbench.switches.registry import check_switches

RUN_KEYS = tuple(RunConfig.model_fields)


def make_plan(cfg: AfbenchConfig, out_dir: Path, job_num: int | None = None) -> Plan:
    """Expand ``cfg.experiment`` into RunSpecs under ``out_dir/runs``. ``job_num`` (a sweep
    job's number) picks the job's block of ``launcher.device_pool``. Every RunSpec records its
    resolved backend (:func:`afbench.backends.resolve.resolve_backend`) and device ids.

    Raises ConfigError (naming ``experiment.variants.<v>`` or ``experiment.phases.<p>``) when an
    override names an unknown key or produces an invalid run config, or when the run's engine
    rejects it (:meth:`afbench.engines.registry.Engine.check`), or a switch does
    (:func:`afbench.switches.registry.check_switches`).
    """
    exp = cfg.experiment
    base = cfg.model_dump(mode="json", include=set(RUN_KEYS))
    variant_names = [exp.baseline] + [v for v in exp.variants if v != exp.baseline]
    configs: dict[tuple[str, str], RunConfig] = {}
    for phase, phase_over in exp.phases.items():
        phased = apply_overrides(base, phase_over, f"experiment.phases.{phase}")
        check_unknown_keys(phased, f"experiment.phases.{phase}")
        if exp.steps is not None:  # every phase short: steps and windows (config.short)
            phased = short_run(phased, exp.steps)
        for variant in variant_names:
            where = f"experiment.variants.{variant} in phase {phase}"
            data = apply_overrides(phased, exp.variants[variant], f"experiment.variants.{variant}")
            configs[(variant, phase)] = rc = validate_run_config(data, where, phase)
            # an engine's bad setting fails now (exit 2), not as a FAILED run after the
            # earlier runs spent their time
            try:
                engine_for(rc).check(rc)
                check_switches(rc)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None

    verdict_phase = exp.verdict_phase or next(
        (p for p in exp.phases if not configs[(exp.baseline, p)].optimization.profiler),
        next(iter(exp.phases)),
    )
    profile_phase = next(
        (p for p in exp.phases if configs[(exp.baseline, p)].optimization.profiler), None
    )
    seed = exp.order_seed
    if exp.order == "random" and seed is None:
        seed = secrets.randbelow(2**31)  # drawn once, recorded in plan.json
    ver = cfg.verdict
    auto = ver.rounds == "auto"
    phases = (
        [verdict_phase] + [p for p in exp.phases if p != verdict_phase]
        if auto
        else list(exp.phases)
    )
    runs: list[RunSpec] = []
    for phase in phases:
        rounds = (ver.min_rounds if auto else ver.rounds) if phase == verdict_phase else 1
        for repeat in range(1, rounds + 1):
            for variant in round_order(variant_names, repeat, exp.order, seed):
                rc = configs[(variant, phase)]
                backend = resolve_backend(rc.backend.name)
                run_id = f"{variant}-{phase}-r{repeat}"
                runs.append(
                    RunSpec(
                        run_id=run_id,
                        index=len(runs) + 1,
                        variant=variant,
                        phase=phase,
                        repeat=repeat,
                        config=rc,
                        config_hash=config_hash(rc, variant, phase, repeat),
                        run_dir=str(out_dir / "runs" / run_id),
                        timeout_s=cfg.launcher.timeout_s,
                        kill_grace_s=cfg.launcher.kill_grace_s,
                        collect_timeout_s=cfg.launcher.collect_timeout_s,
                        env=dict(cfg.launcher.env),
                        backend=backend,
                        devices=assign_devices(
                            rc.parallel, backend, job_num, cfg.launcher.device_pool
                        ),
                    )
                )
    design = None
    if auto:
        design = AutoDesign(
            level=ver.confidence,
            min_pairs=ver.min_rounds,
            max_pairs=ver.max_rounds,
            precision_pct=ver.precision_pct,
            time_budget_s=ver.time_budget_s,
            min_gain_pct=ver.min_gain_pct,
            set_aside_contended=ver.contention == "set_aside",
        )
    return Plan(
        experiment=exp.name,
        baseline=exp.baseline,
        variants=variant_names,
        phases=phases,
        rounds=ver.rounds,
        skip_policy=exp.skip_policy,
        verdict_phase=verdict_phase,
        profile_phase=profile_phase,
        runs=runs,
        order=exp.order,
        order_seed=seed,
        auto=design,
        # verdict.contention=keep too: a run contended on one side of its pair never decides
        rerun_contended=exp.rerun_contended,
        wait_for_quiet_s=exp.wait_for_quiet_s,
    )


def round_order(variants: list[str], repeat: int, order: str, seed: int | None) -> list[str]:
    """The run order of round ``repeat`` (1-based) of ``variants`` (the baseline first).

    ``interleaved``: as given, every round. ``counterbalanced``: as given in odd rounds,
    reversed in even ones. ``random``: a permutation drawn from ``(seed, repeat)`` (the same
    seed gives the same plan); round 1 keeps the baseline first and permutes the rest.

    Raises:
        ValueError: an unknown ``order``, or ``random`` without a seed.
    """
    names = list(variants)
    if order == "interleaved" or (order == "counterbalanced" and repeat % 2):
        return names
    if order == "counterbalanced":
        return names[::-1]
    if order != "random" or seed is None:
        raise ValueError(
            f"order {order!r} with seed {seed!r}: expected counterbalanced, "
            "interleaved or random with a seed"
        )
    rng = random.Random(f"{seed}:{repeat}")  # a str seed: deterministic across runs
    if repeat == 1:
        rest = names[1:]
        rng.shuffle(rest)
        return names[:1] + rest
    rng.shuffle(names)
    return names


def add_round(plan: Plan, variants: list[str]) -> Plan:
    """``plan`` with one more round of its verdict phase for the baseline and ``variants``,
    in the plan's order, inserted after the phase's last run (later phases keep their place,
    indices are renumbered). Each new RunSpec is the variant's round-1 spec with its repeat,
    run id (``<variant>-<phase>-r<k>``), run directory and config hash changed."""
    phase = plan.verdict_phase
    done = [r for r in plan.runs if r.phase == phase]
    repeat = max(r.repeat for r in done) + 1
    first = {r.variant: r for r in done if r.repeat == 1}
    members = [v for v in plan.variants if v == plan.baseline or v in variants]
    new = []
    for variant in round_order(members, repeat, plan.order, plan.order_seed):
        src = first[variant]
        run_id = f"{variant}-{phase}-r{repeat}"
        new.append(
            src.model_copy(
                update={
                    "run_id": run_id,
                    "repeat": repeat,
                    "run_dir": str(Path(src.run_dir).with_name(run_id)),
                    "config_hash": config_hash(src.config, variant, phase, repeat),
                }
            )
        )
    cut = max(i for i, r in enumerate(plan.runs) if r.phase == phase) + 1
    runs = plan.runs[:cut] + new + plan.runs[cut:]
    runs = [r if r.index == i else r.model_copy(update={"index": i}) for i, r in enumerate(runs, 1)]
    return plan.model_copy(update={"runs": runs})


def shadowed_overrides(overrides: list[str], cfg: AfbenchConfig) -> list[str]:
    """Command-line overrides (``key=value``) that a phase or variant of the experiment sets
    again, so they have no effect there; one warning line each, naming where to set it.

    A group selection (``engine=command``) is set again only where the phase or variant
    re-selects it (sets ``engine.name``); one that sets a key inside the group (a free-form
    map such as ``engine.env.SLOW``, or ``engine.args``) refines the selected option and
    shadows nothing."""

    def has(tree: dict[str, Any], parts: list[str]) -> bool:
        for part in parts:
            if not isinstance(tree, dict) or part not in tree:
                return False
            tree = tree[part]
        # the phase or variant sets keys below the overridden one: only a re-selection of a
        # group (its ``name``) undoes a command-line choice of that group
        return not isinstance(tree, dict) or (len(parts) == 1 and "name" in tree)

    out = []
    exp = cfg.experiment
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if key.startswith(("experiment.", "hydra")) or "=" not in item:
            continue
        parts = key.split(".")
        for kind, entries in (("phases", exp.phases), ("variants", exp.variants)):
            for name, over in entries.items():
                tree = expand_dotted(over, f"experiment.{kind}.{name}")
                if has(tree, parts):
                    # a group re-selected there: name the key that re-selects it
                    where = f"{key}.name" if isinstance(tree.get(key), dict) else key
                    out.append(
                        f"{key} is set again by experiment.{kind}.{name}, which wins "
                        f"there; to change it for that {kind[:-1]} use "
                        f"experiment.{kind}.{name}.{where}=..."
                    )
    return out


def misspelt_entries(overrides: list[str], cfg: AfbenchConfig) -> list[str]:
    """Command-line overrides that add a variant or phase (a free-form map: no ``+`` needed,
    afbench.cli.args.free_form_argv) whose name is close to one the experiment already has,
    so a misspelling would add a run per phase instead of changing the one meant; one warning
    line each. An entry counts as added when the command line set every key it holds."""

    def leaves(tree: Any, prefix: str = "") -> list[str]:
        if not isinstance(tree, dict) or not tree:
            return [prefix]
        return [leaf for k, v in tree.items() for leaf in leaves(v, f"{prefix}{k}.")]

    exp, out = cfg.experiment, []
    for kind, entries in (("variants", exp.variants), ("phases", exp.phases)):
        given: dict[str, list[str]] = {}
        for item in overrides:
            parts = item.split("=", 1)[0].lstrip("+~").split(".")
            if len(parts) >= 3 and parts[:2] == ["experiment", kind] and "=" in item:
                rest = ".".join(parts[3:])  # "": the whole entry
                given.setdefault(parts[2], []).append(rest + "." if rest else "")
        for name, keys in given.items():
            if name not in entries:
                continue
            tree = expand_dotted(entries[name], f"experiment.{kind}.{name}")
            if not all(any(leaf.startswith(k) for k in keys) for leaf in leaves(tree)):
                continue  # the entry holds keys the command line did not set: not new
            others = [n for n in entries if n not in given]
            close = difflib.get_close_matches(name, others, n=1, cutoff=0.75)
            if close:
                out.append(
                    f"experiment.{kind}.{name} adds a new {kind[:-1]} beside "
                    f"'{close[0]}'; if you meant '{close[0]}', write "
                    f"experiment.{kind}.{close[0]}.<key>=..."
                )
    return out


def skip_reason(plan: Plan, run: RunSpec, status: dict[str, str]) -> Message | None:
    """Why ``run`` must be skipped given the statuses so far (run_id -> OK/FAILED/SKIPPED).

    reference: a non-baseline run is skipped when the baseline of its phase and repeat did not
    succeed; every later run is skipped when any run that ran did not succeed, in a later
    round of the same phase too (the reference quick-start: run 1 fails -> 2-4 skipped; 1 or
    2 fails -> 3-4 skipped; a failed round 1 skips rounds 2-5).
    per_variant: a run is skipped when its own variant, or the baseline, failed in an earlier
    phase, or the baseline failed in this phase and repeat; other variants go on. The reason,
    a catalog message (``skip_*``), names the rule that applied.

    Only runs that already ran count (``status``): in a counterbalanced or random round a
    variant may run before its round's baseline, and then runs; if that baseline fails later,
    the pair has no number and its comparison reads RUN_FAILED. Round 1 always runs the
    baseline first, so the reference's rules hold there unchanged.
    """

    def bad(run_id: str) -> bool:
        return status.get(run_id, "OK") != "OK"

    baseline_here = f"{plan.baseline}-{run.phase}-r{run.repeat}"
    if run.variant != plan.baseline and bad(baseline_here):
        return say("skip_baseline_failed", run=baseline_here)
    if plan.skip_policy == "reference":  # any run that ran and failed skips all after it,
        # across rounds too (a failed round 1 skips rounds 2-5, as runs 2-4 in the reference)
        failed = next(
            (
                r.run_id
                for r in plan.runs
                if r.run_id != run.run_id and r.run_id in status and bad(r.run_id)
            ),
            None,
        )
        if failed:
            return say("skip_earlier_reference", run=failed)
        return None
    earlier = plan.phases[: plan.phases.index(run.phase)]
    for other in plan.runs:
        if other.phase not in earlier or not bad(other.run_id):
            continue
        # each reason says which rule of the policy applies (docs/configuration.md, experiment.skip_policy)
        if other.variant == plan.baseline:
            return say("skip_earlier_baseline", run=other.run_id)
        if other.variant == run.variant:
            return say("skip_earlier_own_variant", run=other.run_id)
    return None


def calibration_recipe(workload: str) -> str:
    """The shipped recipe that calibrates this host for ``workload``'s runs (``sft`` |
    ``infer``): the ``calibrate_host*`` recipe whose scheduler is that workload's (its
    ``override /scheduler`` default; none: sft), read from the recipe files, so a new
    workload's calibration recipe is named without code. ``calibrate_host`` when none fits."""
    import importlib.resources

    import yaml

    for path in sorted(
        importlib.resources.files("afbench.recipes").iterdir(), key=lambda p: p.name
    ):
        if not (path.name.startswith("calibrate_host") and path.name.endswith(".yaml")):
            continue
        try:
            defaults = yaml.safe_load(path.read_text(encoding="utf-8")).get("defaults") or []
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        scheduler = next(
            (
                d["override /scheduler"]
                for d in defaults
                if isinstance(d, dict) and "override /scheduler" in d
            ),
            "sft",
        )
        if scheduler == workload:
            return path.name[: -len(".yaml")]
    return "calibrate_host"
