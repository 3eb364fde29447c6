"""Through the HTTP API: a burst beyond memory spills, a full spill disk answers 503, nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loader.durability.wal import WalLockedError
from loader.service import LoaderService
from testing.prom import sample_value
from testing.service_harness import OPERATOR, Harness

ROWS_PER_REQUEST = 200


def rows(start: int) -> list[dict[str, object]]:
    return [{"url": f"https://example.com/{i}", "n": i % 1000} for i in range(start, start + ROWS_PER_REQUEST)]


def metric(harness: Harness, name: str, **labels: str) -> float:
    return sample_value(harness.get("/metrics").text, name, **labels)


def test_a_full_spill_disk_answers_503_and_every_acknowledged_update_lands_once(tmp_path: Path) -> None:
    budget = 64 << 10
    spill = {"memory_budget_bytes": budget, "disk_budget_bytes": 4 * budget, "retry_after_seconds": 3}
    with Harness(tmp_path / "data", spill=spill) as h:
        assert h.post("/v1/admin/tables/clicks/pause", token=OPERATOR).status_code == 200
        accepted: list[int] = []
        refused = None
        for request in range(400):
            r = h.post("/v1/tables/clicks/updates", json={"rows": rows(request * ROWS_PER_REQUEST)})
            if r.status_code == 503:
                refused = r
                break
            assert r.status_code == 202, r.text
            accepted.append(request)
        assert refused is not None, "the spill disk budget was never reached"
        assert refused.headers["Retry-After"] == "3"
        assert "spill" in refused.json()["message"]
        assert metric(h, "loader_spill_operations_total", kind="write") > 0
        assert metric(h, "loader_intake_refused_total", reason="spill_full") == 1
        status = h.get("/v1/admin/pending").json()
        assert status["spilled_bytes"] >= 3 * budget  # well beyond memory: it spilled
        assert status["resident_bytes"] <= budget + status["chunk_bytes"]

        assert h.post("/v1/admin/tables/clicks/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("clicks", h.status("clicks")["last_sequence"])
        assert metric(h, "loader_spill_operations_total", kind="read_in_place") > 0
        ns = sorted(r["url"] for r in h.rows("clicks"))
        expected = sorted(f"https://example.com/{i}" for a in accepted for i in range(a * 200, a * 200 + 200))
        assert ns == expected  # every acknowledged row, once
        assert not list((tmp_path / "data" / "spill").rglob("*.parquet"))  # segments deleted after the load
        # Room again: intake accepts.
        assert h.post("/v1/tables/clicks/updates", json={"rows": rows(10**6)}).status_code == 202
        # A request more than memory and the spill disk hold at once is refused for good (413,
        # not a 503 a client would retry forever) and changes nothing.
        before = h.status("clicks")["last_sequence"]
        huge = [r for k in range(100) for r in rows(2 * 10**6 + k * ROWS_PER_REQUEST)]
        answer = h.post("/v1/tables/clicks/updates", json={"rows": huge})
        assert answer.status_code == 413 and "smaller requests" in answer.json()["message"], answer.text
        assert h.status("clicks")["last_sequence"] == before


def test_the_pressure_mode_wraps_the_configured_policy_and_is_reported(tmp_path: Path) -> None:
    pressure = {"enabled": True, "high_watermark": 0.5, "low_watermark": 0.25, "staleness_cap_seconds": 60}
    with Harness(tmp_path / "data", policy="max-benefit", pressure=pressure) as h:
        body = h.get("/v1/admin/policy").json()
        assert body["policy"] == "max-benefit+chain+groups(32)"
        mode = body["state"]["pressure_mode"]
        assert mode["high_watermark_bytes"] == h.settings.spill.memory_budget_bytes // 2
        assert not mode["active"]
        assert metric(h, "loader_pressure_mode") == 0
        # A runtime switch keeps the mode.
        assert (
            h.client.put(
                "/v1/admin/policy", json={"policy": "fifo"}, headers={"Authorization": f"Bearer {OPERATOR}"}
            ).json()["policy"]
            == "fifo+chain+groups(32)"
        )


def test_a_second_instance_on_the_same_data_refuses_before_touching_the_spill_segments(tmp_path: Path) -> None:
    spill = {"memory_budget_bytes": 16 << 10}
    with Harness(tmp_path / "data", spill=spill) as h:
        assert h.post("/v1/admin/tables/clicks/pause", token=OPERATOR).status_code == 200
        for request in range(20):
            assert (
                h.post("/v1/tables/clicks/updates", json={"rows": rows(request * ROWS_PER_REQUEST)}).status_code == 202
            )
        segments = sorted((tmp_path / "data" / "spill").rglob("*.parquet"))
        assert segments

        async def second_instance() -> None:
            async with LoaderService.running(h.settings, load=False):
                pass

        with pytest.raises(WalLockedError):
            asyncio.run(second_instance())
        assert sorted((tmp_path / "data" / "spill").rglob("*.parquet")) == segments
        assert h.post("/v1/admin/tables/clicks/resume", token=OPERATOR).status_code == 200
        h.wait_loaded("clicks", h.status("clicks")["last_sequence"])
        assert len(h.rows("clicks")) == 20 * ROWS_PER_REQUEST
