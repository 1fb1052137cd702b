"""The headline's flags: which problems of a comparison earn a word in the one line a person
reads first (issue 32). Decided here, worded by ``templates/verdict_words.j2`` (``headline``)
from labels.yaml's ``h_*`` keys; everything else a verdict carries goes to the report's "Why"
block (the verdict line).

One flag per problem, in this order: result parity (loss for training, greedy tokens for
inference), rounds the verdict set aside (contended or outlier runs), peak memory above
``report.memory_warn_pct``, a recompile inside the measured window, the first failed run, why
a skipped comparison stopped.
"""

from __future__ import annotations

from afbench.messages import Message, say
from afbench.store import Comparison


def flags(c: Comparison) -> list[Message]:
    """The headline flags of ``c`` as catalog messages (``h_*`` keys of labels.yaml), in the
    order of the module docstring; ``[]`` for a comparison with nothing to flag."""
    out: list[Message] = []
    what = "loss" if c.workload == "sft" else "tokens"
    if c.parity.status == "MATCH":
        out.append(say(f"h_{what}_match"))
    elif c.parity.status == "DIVERGED":
        out.append(
            say(
                f"h_{what}_diverged",
                at=c.parity.diverged_at if c.parity.diverged_at is not None else "?",
            )
        )
    if c.speed.set_aside:
        out.append(say("h_set_aside", n=len(c.speed.set_aside)))
    if c.memory.warn and c.memory.delta_pct is not None:
        out.append(say("h_memory", delta_pct=c.memory.delta_pct))
    if c.variant.recompile or c.baseline.recompile:
        out.append(say("h_recompile"))
    if c.verdict == "RUN_FAILED" and c.reasons:
        more = len(c.reasons) - 1
        out.append(
            say(
                "h_failed_more" if more else "h_failed",
                run=c.reasons[0].partition(":")[0],
                more=more,
            )
        )
    if c.verdict == "SKIPPED" and c.speed.stop_reason:
        out.append(say("h_stopped", reason=c.speed.stop_reason))
    return out
