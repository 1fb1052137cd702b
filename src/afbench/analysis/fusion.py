"""Evidence of a fused RMSNorm in two op tables (:mod:`afbench.analysis.kernels`): the launch
counts of the small ops an unfused RMSNorm decomposes into (``pow``, ``mean``, ``rsqrt``,
``mul``, ``add``, as torch.profiler and torch_npu's ``kernel_details.csv`` name them) and of
the fused kernels, baseline against variant."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import pandas as pd

#: Small ops an unfused RMSNorm decomposes into: x.pow(2).mean(-1) -> + eps -> rsqrt -> * x
#: -> * gamma (often with Casts around it).
RMSNORM_PIECES = ("pow", "mean", "rsqrt", "mul", "add")

#: Names of fused RMSNorm kernels/ops, matched ignoring case and ``_``
#: (``add_rms_norm`` matches ``AddRmsNorm`` and ``aten::npu_add_rms_norm``).
DEFAULT_FUSED_RMSNORM_NAMES = ("add_rms_norm", "rms_norm")

# Whole-name patterns (after dropping a ``ns::`` prefix, an overload ``.suffix`` and an
# in-place ``_``) so that MatMul is not a mul, AddMm/AddRmsNorm not an add, and inductor's
# ``triton_poi_fused_add_mul_pow_*`` kernels are not counted as the pieces they fuse.
_PIECE_PATTERNS = {
    "pow": re.compile(r"pows?"),
    "mean": re.compile(r"(?:reduce)?mean(?:d)?"),
    "rsqrt": re.compile(r"rsqrt"),
    "mul": re.compile(r"muls?"),
    "add": re.compile(r"adds?"),
}


def _bare_op_name(op_type: str) -> str:
    """``aten::add_.Tensor`` -> ``add``; ``ReduceMean`` -> ``reducemean``."""
    name = op_type.strip().lower().rsplit("::", 1)[-1].split(".", 1)[0]
    return name.rstrip("_")


def _squash(name: str) -> str:
    return re.sub(r"[\s_]", "", name.lower())


def rmsnorm_piece(op_type: str) -> str | None:
    """Which :data:`RMSNORM_PIECES` entry ``op_type`` is, or ``None``.

    Matches whole names ignoring case, a ``namespace::`` prefix, an overload suffix and a
    trailing in-place ``_``: ``aten::pow``/``Pow``/``Pows`` -> pow, ``ReduceMean``/
    ``aten::mean`` -> mean, ``Rsqrt`` -> rsqrt, ``Mul``/``Muls`` -> mul, ``Add``/``Adds``/
    ``aten::add_`` -> add. ``MatMul``, ``AddRmsNorm`` and fused generated kernels are not
    pieces.
    """
    bare = _bare_op_name(op_type)
    for piece, pattern in _PIECE_PATTERNS.items():
        if pattern.fullmatch(bare):
            return piece
    return None


def _is_fused(op_type: str, fused_keys: Iterable[str]) -> bool:
    squashed = _squash(op_type)
    return any(key in squashed for key in fused_keys)


def rmsnorm_evidence(
    baseline: pd.DataFrame,
    variant: pd.DataFrame,
    fused_names: Sequence[str] = DEFAULT_FUSED_RMSNORM_NAMES,
) -> dict:
    """Evidence that RMSNorm fusion took effect: its small ops fall, a fused op appears.

    Args:
        baseline, variant: kernel tables (:data:`KERNEL_COLUMNS`; only ``op_type`` and
            ``count`` are used).
        fused_names: substrings naming a fused kernel, matched ignoring case and ``_``.

    Returns:
        A dict::

            {"pieces": {piece: {"baseline": int, "variant": int, "delta": int}},  # per
                                                                # RMSNORM_PIECES entry
             "fused": {"baseline": int, "variant": int, "delta": int,
                       "op_types": [str, ...]},   # fused op types seen on either side
             "pieces_baseline": int, "pieces_variant": int,  # sum over pieces
             "fusion_evident": bool}  # fused count rose and piece count fell

        Counts are launch counts. ``mul`` and ``add`` also serve other layers (SwiGLU,
        residuals), so expect a drop, not zero. An op matching a fused name is never
        counted as a piece.

    Raises:
        ValueError: ``fused_names`` is empty.
    """
    fused_keys = [_squash(n) for n in fused_names if _squash(n)]
    if not fused_keys:
        raise ValueError("fused_names is empty")

    def tally(df: pd.DataFrame) -> tuple[dict[str, int], int, set[str]]:
        pieces = {p: 0 for p in RMSNORM_PIECES}
        fused, fused_types = 0, set()
        for op_type, count in zip(df["op_type"].astype(str), df["count"].astype("int64")):
            if _is_fused(op_type, fused_keys):
                fused += int(count)
                fused_types.add(op_type)
                continue
            piece = rmsnorm_piece(op_type)
            if piece is not None:
                pieces[piece] += int(count)
        return pieces, fused, fused_types

    base_pieces, base_fused, base_types = tally(baseline)
    var_pieces, var_fused, var_types = tally(variant)
    pieces_baseline = sum(base_pieces.values())
    pieces_variant = sum(var_pieces.values())
    return {
        "pieces": {
            p: {
                "baseline": base_pieces[p],
                "variant": var_pieces[p],
                "delta": var_pieces[p] - base_pieces[p],
            }
            for p in RMSNORM_PIECES
        },
        "fused": {
            "baseline": base_fused,
            "variant": var_fused,
            "delta": var_fused - base_fused,
            "op_types": sorted(base_types | var_types),
        },
        "pieces_baseline": pieces_baseline,
        "pieces_variant": pieces_variant,
        "fusion_evident": var_fused > base_fused and pieces_variant < pieces_baseline,
    }
