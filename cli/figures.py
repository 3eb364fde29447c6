"""Figures as people read them in the commands' tables: a few significant digits, thousands
separated, no exponent, each in the unit that makes it a plain number (alpha as
milliseconds per 1,000 rows rather than ``0.0004``; an overhead in ms)."""

from __future__ import annotations

import math


def significant(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, whole numbers whole: 0.000123, 0.123,
    12.3, 12,346 (an integer part is never rounded away)."""
    if value is None or math.isnan(value):
        return "–"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    rounded = float(f"{value:.{digits}g}")  # (9.999 -> 10.0: the magnitude after rounding)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def milliseconds(seconds: float | None) -> str:
    return significant(None if seconds is None else seconds * 1000.0)
