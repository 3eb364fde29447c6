"""Figures as the commands' tables print them (cli/figures.py)."""

from __future__ import annotations

import math

import pytest

from cli.figures import milliseconds, significant


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.000123456, "0.000123"),
        (0.123456, "0.123"),
        (1.23456, "1.23"),
        (12.3456, "12.3"),
        (9.9996, "10.0"),
        (12345.6, "12,346"),
        (1234567.0, "1,234,567"),
        (-0.5, "-0.500"),
        (0.0, "0"),
        (math.inf, "inf"),
        (math.nan, "–"),
        (None, "–"),
    ],
)
def test_a_figure_has_three_significant_digits_and_no_exponent(value: float | None, shown: str) -> None:
    assert significant(value) == shown


def test_seconds_read_as_milliseconds() -> None:
    assert (milliseconds(0.0661), milliseconds(1.92), milliseconds(None)) == ("66.1", "1,920", "–")
