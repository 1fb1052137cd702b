"""Sweeps paired in time: each sweep job runs the baseline combination beside its own.

A sweep (``python -m afbench -m key=a,b ...``) makes one Hydra job per combination; the jobs
run one after another, minutes apart, under whatever load the machine had then. Comparing job
k's runs with the baseline job's runs therefore pairs runs that are far apart in time, and a
change in load between the two jobs reads as an effect. With
``experiment.sweep_pairing=beside`` (the default), every job whose combination is not the
baseline combination also runs the baseline combination, as a variant named
:data:`SWEEP_BASELINE`, in the experiment's counterbalanced rounds beside its own runs, and the
sweep report judges the combination against those runs (:mod:`afbench.sweep`). It costs a
baseline run per job and round; the pairs are then as adjacent as within one experiment
(Kalibera & Jones 2013: randomise / counterbalance what the machine cannot hold constant).
docs/statistics.md §8 and bench/README.md §9 (the drift simulation) say what it buys.

The baseline combination is chosen before any job runs, from the sweep's own command line
(Hydra's ``multirun.yaml`` in the sweep folder, :meth:`afbench.store.SweepDir.swept_values`)
and ``report.sweep_baseline``, by :func:`baseline_setting`; the sweep report picks the same
one. A job cannot pair where the difference is not a value override that a variant can carry
(a swept config group such as ``model=...`` or ``experiment=...``), where the recipe already has
several variants (those are paired within the job), or where the sweeper left no
``multirun.yaml``: it then runs as ``separate`` and its log says why.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from afbench.store import SweepDir

log = logging.getLogger(__name__)

#: The variant under which a paired sweep job runs the baseline combination.
SWEEP_BASELINE = "sweep_baseline"
#: The name a paired job's own variant takes when the recipe called it ``baseline`` (it is not
#: the baseline of that job).
COMBINATION = "combination"


def split_override(override: str) -> tuple[str, str]:
    """``"+a.b=c"`` -> ``("a.b", "c")``: the key without Hydra's ``+``/``++`` add prefix, so
    ``report.sweep_baseline`` names a key the same way whether it was added or overridden."""
    key, _, value = override.partition("=")
    return key.lstrip("+"), value


def same_value(a: str, b: str) -> bool:
    """Equal as override values. Hydra writes a swept ``false`` back as ``False`` (and
    ``0.10`` as ``0.1``), so compare the YAML values, of the same type (``1`` is not ``true``),
    falling back to the text."""
    x, y = _load(a), _load(b)
    return a == b or (type(x) is type(y) and x == y)


def _load(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def is_off(value: str) -> bool:
    """An override value that switches a thing off (``false``, ``0``, ``off``, ``no``,
    ``null``, ``none``; any case)."""
    return value.strip().lower() in ("false", "0", "off", "no", "null", "none")


def baseline_setting(swept: dict[str, list[str]], wanted: str | None) -> dict[str, str]:
    """The baseline combination's value of each swept key: the value ``wanted``
    (``report.sweep_baseline``, ``"key=value,key=value"``) gives the key, else the key's first
    value that switches it off (:func:`is_off`), else its first value."""
    want = dict(split_override(item) for item in (wanted or "").split(",") if "=" in item)
    out = {}
    for key, values in swept.items():
        if key in want:
            out[key] = next((v for v in values if same_value(v, want[key])), want[key])
        else:
            out[key] = next((v for v in values if is_off(v)), values[0] if values else "")
    return out


def _under_a_list(cfg: DictConfig, key: str) -> bool:
    parts = key.split(".")
    for i in range(1, len(parts)):
        node = OmegaConf.select(cfg, ".".join(parts[:i]), default=None)
        if OmegaConf.is_list(node):
            return True
    return False


def at_sweep_level(cfg: DictConfig, swept: dict[str, list[str]]) -> DictConfig:
    """The job's config deciding at the sweep's per-comparison level: ``verdict.confidence`` set
    to :func:`afbench.verdict.sweep_level` of the sweep's own level (the same key in the sweep's
    ``multirun.yaml``, which this sets in no job) for ``m`` comparisons, the combinations
    (product of the swept values' counts, times the recipe's variants) less the baseline
    combination. Each job's report then judges its comparisons at the level its sweep row
    shows them, so that a row and its job's report are one verdict (the sweep stores the job's
    as it is: :mod:`afbench.sweep`). ``cfg`` unchanged when the swept values are unknown."""
    from afbench.verdict.estimate import sweep_level  # no scipy: a sweep job's start-up

    n = 1
    for values in swept.values():
        n *= max(len(values), 1)
    n *= max(len(cfg.experiment.variants), 1)
    level = OmegaConf.select(cfg, "verdict.confidence", default=None)
    if n < 2 or level is None:
        return cfg
    out = cfg.copy()
    out.verdict.confidence = sweep_level(float(level), n - 1)
    return out


def beside_baseline(
    cfg: DictConfig, sweep_dir: Path, job_overrides: list[str], groups: set[str]
) -> tuple[DictConfig, str | None]:
    """The config of a sweep job with the baseline combination added beside its own, and why
    not (None when it was added, or when this job is the baseline combination).

    ``cfg``: the job's composed config (not changed); ``job_overrides``: its command-line
    overrides as Hydra passed them (``hydra.overrides.task``); ``groups``: the config group
    names of the composition (``hydra.runtime.choices``), which a variant cannot switch.
    With ``experiment.sweep_pairing=beside``, a single-variant experiment whose swept values
    differ from :func:`baseline_setting`'s gets ``experiment.variants`` =
    ``{sweep_baseline: its overrides + the baseline values, <own>: its overrides + its own
    values of the swept keys that differ}`` (own named
    :data:`COMBINATION` when the recipe called it ``baseline``) and ``experiment.baseline =
    sweep_baseline``; the values are typed as Hydra types them (``False``, ``0.1``). Every
    job whose sweep's values are known decides at the sweep's per-comparison level
    (:func:`at_sweep_level`), paired or not."""
    swept = SweepDir(Path(sweep_dir)).sweep_plan()
    cfg = at_sweep_level(cfg, swept or {})
    exp = cfg.experiment
    if exp.get("sweep_pairing", "beside") != "beside":
        return cfg, None
    if swept is None:
        return cfg, (
            f"the sweep folder {sweep_dir} has no multirun.yaml of Hydra's basic "
            "sweeper to read the swept values from"
        )
    own = dict(split_override(o) for o in job_overrides if "=" in o)
    base = baseline_setting(swept, OmegaConf.select(cfg, "report.sweep_baseline"))
    differ = {k: v for k, v in base.items() if not same_value(own.get(k, v), v)}
    if not differ:
        return cfg, None  # this job is the baseline combination
    n_variants = len(exp.get("variants") or {})
    if n_variants != 1:
        return cfg, (
            f"the recipe has {n_variants} variants, compared within the job; "
            "across jobs it is compared with the baseline job's runs"
        )
    unpairable = [k for k in differ if k in groups or k.split(".")[0] in ("experiment", "hydra")]
    if unpairable:
        return cfg, (
            f"{', '.join(unpairable)} selects a config group or the experiment, which "
            "a variant cannot change; compared with the baseline job's runs"
        )
    in_list = [k for k in differ if _under_a_list(cfg, k)]
    if in_list:
        return cfg, (
            f"{', '.join(in_list)} is an element of a list, which a variant cannot "
            "override; compared with the baseline job's runs"
        )
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def typed(setting: dict[str, str]) -> dict[str, Any]:
        parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in setting.items()])
        return {o.key_or_group.lstrip("+~"): o.value() for o in parsed}

    values = typed(differ)
    # the job's own values again on its own side: its report and its history series then
    # name the combination it is (the composed config has them already)
    mine = typed({k: own[k] for k in differ if k in own})
    ((name, overrides),) = OmegaConf.to_container(exp.variants, resolve=False).items()
    overrides = dict(overrides or {})
    paired = OmegaConf.to_container(cfg, resolve=False)
    paired["experiment"]["variants"] = {
        SWEEP_BASELINE: {**overrides, **values},
        (COMBINATION if name == "baseline" else name): {**overrides, **mine},
    }
    paired["experiment"]["baseline"] = SWEEP_BASELINE
    out = OmegaConf.create(paired)
    log.info(
        "afbench: sweep pairing: this job also runs the baseline combination (%s) as "
        "variant %s, beside its own runs",
        ", ".join(f"{k}={v}" for k, v in differ.items()),
        SWEEP_BASELINE,
    )
    return out, None
