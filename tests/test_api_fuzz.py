"""Fuzz the HTTP API from its own OpenAPI document (schemathesis): no input may cause a 5xx.

The service runs under uvicorn in a thread (one event loop, as in production) with the
Spark-free sink, so hundreds of generated requests take seconds. Every request carries
the operator token, so generated bodies reach validation instead of stopping at 401.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from api.app import create_app
from tests.service_harness import OPERATOR, make_settings, serve_in_thread


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_in_thread(Path(tmp_path_factory.mktemp("fuzz")) / "data") as (url, _):
        yield url


# The document does not depend on the service's state: build it without starting one.
schema = schemathesis.openapi.from_dict(create_app(make_settings(Path("unused"))).openapi())


@schema.parametrize()
@settings(max_examples=40, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_service_fail(case, base_url: str) -> None:  # type: ignore[no-untyped-def]
    case.call_and_validate(
        base_url=base_url, headers={"Authorization": f"Bearer {OPERATOR}"}, checks=[not_a_server_error]
    )
