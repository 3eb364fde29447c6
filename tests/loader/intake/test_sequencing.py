"""Sequence numbers and release times: strictly increasing per table, all or nothing, never in the future."""

from __future__ import annotations

import pytest

from loader.core.errors import Invalid
from loader.intake.requests import ValidUpdate
from loader.intake.sequencing import TableSequence, plan_updates


def test_plan_updates_is_all_or_nothing_and_never_future() -> None:
    tables = {"t": TableSequence(next_seq=5, last_release=100.0, committed_seq=4)}
    updates, touched = plan_updates(
        [ValidUpdate("t", None), ValidUpdate("t", 103.0), ValidUpdate("t", None)], tables, now=102.0, skew=5.0
    )
    assert touched == {"t"} and [u.seq for u in updates] == [5, 6, 7]
    releases = [u.release for u in updates]
    assert releases[0] == 102.0 and releases == sorted(set(releases)) and max(releases) <= 102.0 + 1e-9
    assert (tables["t"].next_seq, tables["t"].last_release) == (8, releases[-1])
    with pytest.raises(Invalid, match="not after"):  # the second refuses the whole request
        plan_updates([ValidUpdate("t", None), ValidUpdate("t", 50.0)], tables, now=110.0, skew=5.0)
    with pytest.raises(Invalid, match="in the future"):
        plan_updates([ValidUpdate("t", 200.0)], tables, now=110.0, skew=5.0)
    assert tables["t"].next_seq == 8  # nothing taken by the refused requests
