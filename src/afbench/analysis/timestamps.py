"""Exact profiler timestamps.

torch_npu writes absolute microseconds since the epoch with a nanosecond fraction
(``"1732873000000121.375"``, about 1.7e15): 19 significant digits, more than float64's 15-17,
so a float would move a kernel by up to a quarter of a microsecond and make spans of
neighbouring kernels overlap or gap. These helpers keep integer nanoseconds.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation


def us_to_ns(value: object) -> int:
    """Integer nanoseconds of a microsecond timestamp or duration given as a string (with or
    without a fraction, surrounding whitespace and torch_npu's trailing tab), an int, a
    :class:`decimal.Decimal` (JSON read with ``parse_float=Decimal``) or a float.

    Raises:
        ValueError: the value is empty, not a number, or not finite.
    """
    if isinstance(value, bool):
        raise ValueError(f"timestamp {value!r} is not a number")
    if isinstance(value, int):
        return value * 1000
    text = value.strip() if isinstance(value, str) else str(value)
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"timestamp {value!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"timestamp {value!r} is not finite")
    return int((number * 1000).to_integral_value())


def ns_to_us(ns: int) -> float:
    """Microseconds (float) of a *difference* of nanosecond timestamps (spans, durations),
    small enough for float64 to hold exactly to the nanosecond."""
    return ns / 1000.0
