"""The worker contract: what a run is (RunSpec), what a plan is, how its identity is hashed,
how its outcome is recorded (RunStatus), and the worker protocol (exit code and log prefixes).

A leaf module (it imports only :mod:`afbench.config`, :mod:`afbench.errors`,
:mod:`afbench.messages` and :mod:`afbench.schema`), so that the
planner, the launcher, the worker, the engines and the collector all read one definition and
none of them has to import another to learn it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict

from afbench.config.models import RunConfig
from afbench.messages import Message
from afbench.schema import SCHEMA_VERSION

#: Exit status of a worker whose run was skipped (a switch the backend cannot honour); the
#: reference script's status for a skipped run.
SKIPPED_EXIT_CODE = 125
#: status.json reason (its catalog key) of a run stopped by Ctrl-C / SIGTERM to afbench (status
#: SKIPPED: it did not fail, it was stopped), and of the runs after it that never started
INTERRUPTED_REASON = "skip_interrupted"
#: Prefix of the one line a failing worker prints last; the launcher puts the rest of the
#: line into status.json and the report.
ERROR_PREFIX = "afbench.worker: error: "
#: Prefix of the line a skipped worker prints with the reason.
SKIP_PREFIX = "afbench.worker: skipped: "


class RunSpec(BaseModel):
    """One worker process. Written to ``<run_dir>/runspec.json``; the worker reads only that."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION  # the output directory's (afbench.store.versioning)
    run_id: str
    index: int  # 1-based position in the plan
    variant: str
    phase: str
    repeat: int  # 1-based
    config: RunConfig
    config_hash: str  # sha256 of the canonical JSON of (config, variant, phase, repeat)
    run_dir: str
    timeout_s: float
    kill_grace_s: float
    # seconds afbench may spend reading the run's log once it ended (launcher.collect_timeout_s)
    collect_timeout_s: float = 300.0
    env: dict[str, str] = {}
    # Resolved backend and the device ids this run holds (afbench.launch.devices); not part of
    # config_hash, so resume matches runs wherever they ran.
    backend: Literal["cpu", "cuda", "npu"] | None = None
    devices: list[int] | None = None


class AutoDesign(BaseModel):
    """The stopping rule of ``verdict.rounds=auto`` as planned (the settings of
    :class:`afbench.verdict.SequentialDesign`), so that a re-render recomputes the
    verdict from the stored runs. Pairs (the statistics' word) = rounds of the verdict phase; percent of baseline time;
    seconds."""

    model_config = ConfigDict(extra="forbid")

    level: float
    min_pairs: int
    max_pairs: int
    precision_pct: float | None
    time_budget_s: float | None
    min_gain_pct: float
    set_aside_contended: bool = True  # verdict.contention == "set_aside"


class AutoStop(BaseModel):
    """Why the adaptive loop stopped adding rounds for one variant (sequential.py's reasons,
    or ``run_failed`` / ``interrupted``), after how many pairs."""

    model_config = ConfigDict(extra="forbid")

    reason: str
    n_pairs: int


class Rerun(BaseModel):
    """A contended verdict-phase run that was run again (``experiment.rerun_contended``):
    ``replaced`` is its RunSpec (its directory is kept, its status.json names ``by``), ``by``
    the run_id of the run that took its place in ``Plan.runs``, ``reasons`` the contention
    thresholds it crossed (:func:`afbench.analysis.contention.judge`, as ``cont_reason_*``
    messages)."""

    model_config = ConfigDict(extra="forbid")

    replaced: RunSpec
    by: str
    reasons: list[Message] = []


class Plan(BaseModel):
    """Every RunSpec of one experiment in launch order, with what the report needs to read them
    (baseline, verdict and profile phase). Written to ``<out>/plan.json``; with
    ``rounds="auto"`` it is rewritten (atomically) whenever a round is added and when the
    loop ends (``auto_stops``). Plans written before ``order`` existed ran interleaved."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION  # the output directory's (afbench.store.versioning)
    experiment: str
    baseline: str
    variants: list[str]
    phases: list[str]
    rounds: int | Literal["auto"]  # verdict.rounds (plan.json before schema 5: repeats)
    skip_policy: str
    verdict_phase: str
    profile_phase: str | None
    runs: list[RunSpec]
    order: Literal["counterbalanced", "interleaved", "random"] = "interleaved"
    order_seed: int | None = None
    auto: AutoDesign | None = None  # rounds="auto" only
    auto_stops: dict[str, AutoStop] = {}  # variant -> why its rounds ended
    # experiment.rerun_contended: how many times a contended verdict-phase run is run again
    # (0 in plans written before it existed); reruns: the runs replaced, in launch order
    rerun_contended: int = 0
    reruns: list[Rerun] = []
    # experiment.wait_for_quiet_s: the longest wait for a quiet machine before a verdict-phase
    # run starts (0 in plans written before it existed: they never waited)
    wait_for_quiet_s: float = 0.0

    def quiet_s(self, run: RunSpec) -> float:
        """How long ``run`` waits for a quiet machine (afbench.launch.quiet):
        :attr:`wait_for_quiet_s` for a verdict-phase run (its contention decides whether it
        counts), else 0."""
        return self.wait_for_quiet_s if run.phase == self.verdict_phase else 0.0


class RunStatus(BaseModel):
    """Outcome of one run, written to ``<run_dir>/status.json`` (read through
    :data:`afbench.store.run.STATUS_FILE`, which upgrades older versions). ``reason``: why it
    did not succeed (or that it was resumed), a catalog message; an error text is kept as
    written (``as_written``); None for a run that succeeded."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION  # the output directory's (afbench.store.versioning)
    run_id: str
    status: str  # OK | FAILED | SKIPPED
    exit_code: int | None
    reason: Message | None = None
    wall_s: float = 0.0  # seconds, wall clock of the whole worker process
    started_at: str | None = None
    finished_at: str | None = None
    config_hash: str
    lock_wait_s: float | None = None  # seconds spent waiting for the device lock(s)
    # the compiler caches the run started with (afbench.launch.local.kernel_cache_state):
    # "warm" = they held kernels an earlier run of the experiment had built, so its time to
    # first step has no kernel compilation in it; "cold"; None = not recorded
    kernel_cache: str | None = None
    # a contended run replaced by a rerun (experiment.rerun_contended): the rerun's run_id;
    # resume never reuses such a run
    replaced_by: str | None = None


def config_hash(config: RunConfig, variant: str, phase: str, repeat: int) -> str:
    """Hex sha256 of the canonical JSON (sorted keys, no spaces) of ``{config, variant, phase,
    repeat}``: a run's identity for resume, independent of where and when it ran."""
    payload = {
        "config": config.model_dump(mode="json"),
        "variant": variant,
        "phase": phase,
        "repeat": repeat,
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()
