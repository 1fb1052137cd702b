"""Generated-text sanity check (the inference tutorial's ok / warning / failed, docs/reference.md §2).

Rules, per generated sequence:
- failed: empty output (no token, or only whitespace after decoding);
- warning: a degenerate repetition loop (the last ``min_repeats`` n-grams of some size 1..8
  identical, e.g. one token 8 times in a row or a 4-token phrase 4 times in a row);
- warning: undecodable tokens (U+FFFD replacement characters in the decoded text).
Overall status: failed if any sequence failed, else warning if any warned, else ok.
"""

from __future__ import annotations

from typing import Sequence

REPLACEMENT = "\ufffd"


def repetition_loop(
    tokens: Sequence[int], max_ngram: int = 8, min_repeats: int = 4, min_single: int = 8
) -> int | None:
    """Size of the n-gram repeated back to back at the end of ``tokens`` (None if none).

    A single token must repeat ``min_single`` times; an n-gram of size 2..max_ngram
    ``min_repeats`` times.
    """
    for n in range(1, max_ngram + 1):
        need = min_single if n == 1 else min_repeats
        if len(tokens) < n * need:
            continue
        tail = list(tokens[-n:])
        if all(
            list(tokens[len(tokens) - (k + 1) * n : len(tokens) - k * n]) == tail
            for k in range(need)
        ):
            return n
    return None


def sanity_check(texts: Sequence[str], token_ids: Sequence[Sequence[int]]) -> dict:
    """Classify each generation; returns ``{"status", "counts": {ok, warning, failed},
    "empty", "repetition_loops", "undecodable", "details": [...]}``."""
    counts = {"ok": 0, "warning": 0, "failed": 0}
    empty = loops = undecodable = 0
    details = []
    for i, (text, toks) in enumerate(zip(texts, token_ids)):
        problems = []
        state = "ok"
        if not toks or not text.strip():
            empty += 1
            state = "failed"
            problems.append("empty output")
        else:
            n = repetition_loop(toks)
            if n is not None:
                loops += 1
                state = "warning"
                problems.append(f"repetition loop of a {n}-token sequence at the end")
            if REPLACEMENT in text:
                undecodable += 1
                state = "warning"
                problems.append(f"{text.count(REPLACEMENT)} undecodable character(s)")
        counts[state] += 1
        details.append({"index": i, "status": state, "problems": problems})
    status = "failed" if counts["failed"] else "warning" if counts["warning"] else "ok"
    return {
        "status": status,
        "counts": counts,
        "empty": empty,
        "repetition_loops": loops,
        "undecodable": undecodable,
        "details": details,
    }
