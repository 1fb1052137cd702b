"""Expand an experiment into RunSpecs: variant x phase x repeat, each with its own config.

Order (the reference's): phase by phase; within a phase, repeats interleaved (r1: baseline,
A, B; r2: baseline, A, B; ...) so drift over time hits every variant alike; the baseline first.
The effective config of a run is the composed config, then the phase's dotted overrides, then
the variant's (the variant wins: it is what is being compared).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from afbench.backends.resolve import resolve_backend
from afbench.config.models import AfbenchConfig, RunConfig
from afbench.config.validate import apply_overrides, expand_dotted, validate_run_config
from afbench.engines.registry import engine_for
from afbench.errors import ConfigError
from afbench.launch.devices import assign_devices
from afbench.runspec import Plan, RunSpec, config_hash

RUN_KEYS = tuple(RunConfig.model_fields)


def make_plan(cfg: AfbenchConfig, out_dir: Path, job_num: int | None = None) -> Plan:
    """Expand ``cfg.experiment`` into RunSpecs under ``out_dir/runs``. ``job_num`` (a sweep
    job's number) picks the job's block of ``launcher.device_pool``. Every RunSpec records its
    resolved backend (:func:`afbench.backends.resolve.resolve_backend`) and device ids.

    Raises ConfigError (naming ``experiment.variants.<v>`` or ``experiment.phases.<p>``) when an
    override names an unknown key or produces an invalid run config, or when the run's engine
    rejects it (:meth:`afbench.engines.registry.Engine.check`).
    """
    exp = cfg.experiment
    base = cfg.model_dump(mode="json", include=set(RUN_KEYS))
    variant_names = [exp.baseline] + [v for v in exp.variants if v != exp.baseline]
    runs: list[RunSpec] = []
    configs: dict[tuple[str, str], RunConfig] = {}
    for phase, phase_over in exp.phases.items():
        phased = apply_overrides(base, phase_over, f"experiment.phases.{phase}")
        for variant in variant_names:
            where = f"experiment.variants.{variant} in phase {phase}"
            data = apply_overrides(phased, exp.variants[variant], f"experiment.variants.{variant}")
            configs[(variant, phase)] = rc = validate_run_config(data, where)
            # an engine's bad setting fails now (exit 2), not as a FAILED run after the
            # earlier runs spent their time
            try:
                engine_for(rc).check(rc)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None

    for phase in exp.phases:
        for repeat in range(1, exp.repeats + 1):
            for variant in variant_names:
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
                        env=dict(cfg.launcher.env),
                        backend=backend,
                        devices=assign_devices(rc.parallel, backend, job_num,
                                               cfg.launcher.device_pool),
                    )
                )
    verdict_phase = exp.verdict_phase or next(
        (p for p in exp.phases if not configs[(exp.baseline, p)].optimization.profiler),
        next(iter(exp.phases)),
    )
    profile_phase = next(
        (p for p in exp.phases if configs[(exp.baseline, p)].optimization.profiler), None
    )
    return Plan(
        experiment=exp.name,
        baseline=exp.baseline,
        variants=variant_names,
        phases=list(exp.phases),
        repeats=exp.repeats,
        skip_policy=exp.skip_policy,
        verdict_phase=verdict_phase,
        profile_phase=profile_phase,
        runs=runs,
    )


def shadowed_overrides(overrides: list[str], cfg: AfbenchConfig) -> list[str]:
    """Command-line overrides (``key=value``) that a phase or variant of the experiment sets
    again, so they have no effect there; one warning line each, naming where to set it."""
    def has(tree: dict[str, Any], parts: list[str]) -> bool:
        for part in parts:
            if not isinstance(tree, dict) or part not in tree:
                return False
            tree = tree[part]
        return True

    out = []
    exp = cfg.experiment
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if key.startswith(("experiment.", "hydra")) or "=" not in item:
            continue
        parts = key.split(".")
        for kind, entries in (("phases", exp.phases), ("variants", exp.variants)):
            for name, over in entries.items():
                if has(expand_dotted(over, f"experiment.{kind}.{name}"), parts):
                    out.append(f"{key} is set again by experiment.{kind}.{name}, which wins "
                               f"there; to change it for that {kind[:-1]} use "
                               f"experiment.{kind}.{name}.{key}=...")
    return out


def skip_reason(plan: Plan, run: RunSpec, status: dict[str, str]) -> str | None:
    """Why ``run`` must be skipped given the statuses so far (run_id -> OK/FAILED/SKIPPED).

    reference: a non-baseline run is skipped when the baseline of its phase and repeat did not
    succeed; every run of a phase is skipped when any run of an earlier phase did not succeed
    (REFERENCE §1: run 1 fails -> 2-4 skipped; 1 or 2 fails -> 3-4 skipped).
    per_variant: a run is skipped when its own variant, or the baseline, failed in an earlier
    phase, or the baseline failed in this phase and repeat; other variants go on.
    """
    def bad(run_id: str) -> bool:
        return status.get(run_id, "OK") != "OK"

    baseline_here = f"{plan.baseline}-{run.phase}-r{run.repeat}"
    if run.variant != plan.baseline and bad(baseline_here):
        return f"baseline run {baseline_here} did not succeed"
    earlier = plan.phases[: plan.phases.index(run.phase)]
    for other in plan.runs:
        if other.phase not in earlier or not bad(other.run_id):
            continue
        if plan.skip_policy == "reference" or other.variant in (run.variant, plan.baseline):
            return f"earlier run {other.run_id} did not succeed"
    return None

