"""``experiment.json`` (:class:`ExperimentRecord`): what an experiment ran with, written once
when it starts (:func:`afbench.experiment.run_experiment`): the composed config, the content
hashes of its inputs, the host calibration it decides with, and its provenance for the
history."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from afbench.config.models import AfbenchConfig, ReportConfig
from afbench.config.verdict import MOVED, VerdictConfig
from afbench.store.names import EXPERIMENT
from afbench.store.versioning import FileSchema, Record, StoredFile, same_shape


class Asset(Record):
    """An input's path and content SHA-256 (hex; :func:`afbench.assets.content_sha256`)."""

    path: str | None = None
    sha256: str | None = None


class Assets(Record):
    """Content SHA-256 of the model folder and data file (experiment.json ``assets``)."""

    model: Asset = Asset()
    data: Asset = Asset()


class RunLocationRecord(Record):
    """What a kind of run took when calibrated (:class:`afbench.verdict.RunLocation`): step_s
    (geometric mean of the calibration runs' median step times, s) over n_runs runs, that
    kind's spread_pct and df. Strict JSON numbers: a string or a boolean (``n_runs: true``,
    which Python would take as 1) is refused, naming the key."""

    step_s: float = Field(gt=0, allow_inf_nan=False, strict=True)
    n_runs: int = Field(ge=1, strict=True)
    spread_pct: float = Field(gt=0, allow_inf_nan=False, strict=True)
    df: float = Field(gt=0, allow_inf_nan=False, strict=True)


class HostCalibration(Record):
    """This host's run-to-run spread of a kind of run, as the experiment read it from the
    history database (:func:`afbench.history.calibration.lookup`): spread_pct (sd of one
    pair's log ratio, percent), df, n_pairs, n_outlier_pairs, n_experiments pooled, when
    it was last updated (ISO 8601), and what the baseline's / variant's kind of run took then
    (baseline_runs / variant_runs, schema 3; None when not known): a one-round verdict checks
    its runs against them. The numbers are strict JSON numbers in range: a hand-edited
    string, boolean, negative or zero value is an OutputError naming the key, for the report
    and for ``python -m afbench.history import`` alike."""

    kind: str
    host_id: str
    spread_pct: float = Field(gt=0, allow_inf_nan=False, strict=True)
    # afbench.verdict's run_spread_df range
    df: float = Field(ge=1, allow_inf_nan=False, strict=True)
    n_pairs: int = Field(ge=1, strict=True)
    n_outlier_pairs: int = Field(0, ge=0, strict=True)
    n_experiments: int = Field(1, ge=1, strict=True)
    updated_at: str | None = None
    baseline_runs: RunLocationRecord | None = None
    variant_runs: RunLocationRecord | None = None


class HostFingerprint(Record):
    """:func:`afbench.history.provenance.host_fingerprint`: hostname, CPU model and count,
    accelerator names, driver (``nvidia 550.54`` | ``ascend 24.1.rc2``) and host_id (16 hex
    digits)."""

    hostname: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    accelerator: str | None = None
    driver: str | None = None
    host_id: str | None = None


class Provenance(Record):
    """:func:`afbench.history.provenance.provenance`: the afbench version, the git commit of
    the working directory (``+dirty`` when changed), that directory, the host and the CANN
    components' build dates (``20YYMMDD``; npu only)."""

    afbench: str | None = None
    git_commit: str | None = None
    cwd: str | None = None
    host: HostFingerprint = HostFingerprint()
    cann: dict[str, str | None] | None = None


class ExperimentRecord(StoredFile):
    """``experiment.json``. ``config``: the composed, validated config the experiment ran
    with (None only in the empty record of a directory without the file); created_at: ISO
    8601, UTC; calibration: the host calibration a one-round verdict decides with (None: none
    found or not looked up), kept so that an offline re-render decides as the run did."""

    created_at: str | None = None
    config: AfbenchConfig | None = None
    assets: Assets = Assets()
    calibration: HostCalibration | None = None
    provenance: Provenance = Provenance()

    @property
    def report(self) -> ReportConfig:
        """The ``report`` section the experiment ran with (the defaults without a config)."""
        return self.config.report if self.config is not None else ReportConfig()

    @property
    def verdict(self) -> VerdictConfig:
        """The ``verdict`` section the experiment ran with (the defaults without a config)."""
        return self.config.verdict if self.config is not None else VerdictConfig()

    @property
    def variants(self) -> dict[str, dict[str, Any]]:
        """Variant -> its dotted overrides (``{}`` without a config)."""
        return dict(self.config.experiment.variants) if self.config is not None else {}

    def calibration_dict(self) -> dict[str, Any] | None:
        """The calibration as the verdict library and summary.json take it (a plain dict)."""
        return self.calibration.model_dump() if self.calibration is not None else None


def experiment_v5_to_v6(data: dict[str, Any]) -> dict[str, Any]:
    """Version 5 -> 6: the config's verdict settings move to its ``verdict`` section
    (:data:`afbench.config.verdict.MOVED`: ``experiment.repeats`` -> ``verdict.rounds``,
    ``report.confidence`` -> ``verdict.confidence``, ...); a value already there wins."""
    config = data.get("config")
    if not isinstance(config, dict):
        return data
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    verdict = dict(config.get("verdict") or {})
    for old, new in MOVED.items():
        section, key = old.split(".")
        if isinstance(config.get(section), dict) and key in config[section]:
            verdict.setdefault(new.split(".")[1], config[section].pop(key))
    if verdict:
        config["verdict"] = verdict
    return {**data, "config": config}


#: experiment.json: versions 0 and 1 carried no schema_version and the same keys (the
#: calibration and provenance came in version 1, both optional); version 3 adds the
#: calibration's run locations (optional); 5 -> 6: :func:`experiment_v5_to_v6`.
EXPERIMENT_FILE = FileSchema(
    EXPERIMENT, ExperimentRecord, steps=(same_shape,) * 5 + (experiment_v5_to_v6,)
)
