"""Schemathesis fuzzing of the service's own OpenAPI document, as each kind of caller.

Shared by ``tests/api/test_api_fuzz.py`` (a few examples per operation, in CI) and
``trials/api_fuzz.py`` (many, on demand), so both run the same generation and the
same checks. Every operation is fuzzed once per role with positive data (fits the
document) and negative data (does not), and every response must:

- not be a 5xx;
- have a documented status code, content type and headers;
- match the documented body schema;
- for negative data, be a 4xx (the service must not accept what its document forbids);
- for a caller who may not call the operation at all, be exactly 401 (no token) or 403
  (a producer on an operator route), whatever the request holds: authentication and
  authorization come before validation.

Findings are collected, not raised at the first one, so a long run counts all of them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import CheckFunction, not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup, ServerError
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from loader.service import LoaderService
from testing.service_harness import CLICKS, OPERATOR, ORDERS, ORDERS_ONLY, PRODUCER, make_settings

#: Who calls: the harness's tokens (testing/service_harness.py), and nobody.
ROLES: dict[str, str | None] = {
    "operator": OPERATOR,
    "producer": PRODUCER,
    "orders-only producer": ORDERS_ONLY,
    "no token": None,
}

#: Examples per operation, role and mode in CI (tests/api/test_api_fuzz.py): the operator
#: reaches the most code; without a token everything must stop at 401, which a couple show.
CI_EXAMPLES = {"operator": 8, "producer": 4, "orders-only producer": 4, "no token": 2}

CHECKS: tuple[CheckFunction, ...] = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
)

#: Tables the harness registers: some generated requests name them, so that bodies get
#: past the 404 and reach row validation and the WAL.
KNOWN_TABLES = (ORDERS["name"], CLICKS["name"])

#: How findings are grouped in reports.
KINDS: dict[str, str] = {
    "ServerError": "5xx",
    "ContentTypeServerError": "5xx",
    "AcceptedNegativeData": "accepted invalid data",
}
SCHEMA_KINDS = frozenset({"schema", "status code", "content type", "headers"})


#: Operations a role may not call at all, and the one status it must get for them.
def refused_status(role: str, operation: Any) -> int | None:
    if ROLES[role] is None and operation.path != "/healthz":
        return 401
    if role in ("producer", "orders-only producer") and operation.path.startswith("/v1/admin"):
        return 403
    return None


def kind_of(failure: Failure) -> str:
    name = type(failure).__name__
    if name in KINDS:
        return KINDS[name]
    if "StatusCode" in name:
        return "status code"
    if "ContentType" in name or "MediaType" in name:
        return "content type"
    if "Header" in name:
        return "headers"
    return "schema"  # JsonSchemaError, MalformedJson, ContentDeserializationError, ...


def load_schema() -> Any:
    """The document as the service serves it; it does not depend on state, so no service is started.

    Schemathesis would make up bearer tokens (and drop them in negative cases); here the
    role decides the token, so it does not generate security parameters.
    """
    schema = schemathesis.openapi.from_dict(create_app(make_settings(Path("unused"))).openapi())
    schema.config.generation.update(with_security_parameters=False)
    return schema


def operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


_ANNOTATIONS = frozenset({"title", "description", "examples", "example"})


def can_be_invalid(operation: Any) -> bool:
    """Negative data needs something to break: a body, or a parameter with more of a schema
    than "a string" (every path segment is one; schemathesis would search in vain)."""
    definition = operation.definition.raw
    if definition.get("requestBody"):
        return True
    for parameter in definition.get("parameters", []):
        schema = {k: v for k, v in parameter.get("schema", {}).items() if k not in _ANNOTATIONS}
        if schema != {"type": "string"}:
            return True
    return False


_COLUMN_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=20),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float32": st.floats(width=32, allow_nan=False, allow_infinity=False),
    "float64": st.floats(allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
}


def valid_rows(table: dict[str, Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Rows that fit one of the harness's tables: the document cannot say what a table
    holds, so without these no generated update would ever be acknowledged."""
    fields = {}
    for column in table["schema"]["columns"]:
        value = _COLUMN_VALUES[column["type"]]
        fields[column["name"]] = value if column.get("nullable") is False else st.none() | value
    return st.lists(st.fixed_dictionaries(fields), min_size=1, max_size=5)


def _submissions(operation: Any, mode: GenerationMode) -> list[st.SearchStrategy[Any]]:
    """Cases of the feed routes whose body fits an existing table (JSON, positive mode only)."""
    if mode is GenerationMode.NEGATIVE or operation.method.upper() != "POST":
        return []
    tables = {"orders": ORDERS, "clicks": CLICKS}
    if operation.path == "/v1/tables/{table}/updates":
        return [
            valid_rows(table).flatmap(
                lambda rows, name=name: operation.as_strategy(
                    mode, path_parameters={"table": name}, body={"rows": rows}, media_type="application/json"
                )
            )
            for name, table in tables.items()
        ]
    if operation.path == "/v1/updates":
        update = st.sampled_from(sorted(tables)).flatmap(
            lambda name: valid_rows(tables[name]).map(lambda rows: {"table": name, "rows": rows})
        )
        return [
            st.lists(update, min_size=1, max_size=3).flatmap(
                lambda updates: operation.as_strategy(mode, body={"updates": updates}, media_type="application/json")
            )
        ]
    return []


def case_strategy(operation: Any, mode: GenerationMode) -> st.SearchStrategy[Any]:
    """Generated cases. Where a path names a table, a third of the positive ones name one
    that exists; on the feed routes, another third carry rows that fit it."""
    generated = operation.as_strategy(mode)
    if "{table}" not in operation.path or mode is GenerationMode.NEGATIVE:
        existing: list[st.SearchStrategy[Any]] = []
    else:
        existing = [st.one_of(*(operation.as_strategy(mode, path_parameters={"table": t}) for t in KNOWN_TABLES))]
    submissions = _submissions(operation, mode)
    if not existing and not submissions:
        return generated
    return st.one_of(generated, *existing, *([st.one_of(*submissions)] if submissions else []))


@dataclass
class Finding:
    operation: str
    role: str
    mode: str
    kind: str
    status: int | None
    title: str
    message: str
    curl: str
    count: int = 1


@dataclass
class Tally:
    """What a fuzzing run generated, got back and found."""

    cases: Counter[str] = field(default_factory=Counter)  # by role
    cases_by_operation: Counter[str] = field(default_factory=Counter)
    cases_by_mode: Counter[tuple[str, str]] = field(default_factory=Counter)  # (role, positive/negative)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)  # (role, status)
    server_errors: int = 0
    schema_violations: int = 0
    accepted_invalid: int = 0
    transport_errors: int = 0
    refusals_missed: int = 0  # a caller without the right got something other than 401/403
    findings: dict[tuple[str, str, str, int | None, str], Finding] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.cases.values())

    def record(self, finding: Finding) -> None:
        key = (finding.operation, finding.role, finding.kind, finding.status, finding.title)
        if key in self.findings:
            self.findings[key].count += 1
        else:
            self.findings[key] = finding

    def report(self, limit: int = 20) -> str:
        lines = []
        for f in list(self.findings.values())[:limit]:
            lines.append(
                f"- {f.operation} as {f.role} ({f.mode}, {f.count}x): {f.kind}: {f.title} [{f.status}]\n"
                f"  {f.message.strip()[:600]}\n  {f.curl[:600]}"
            )
        return "\n".join(lines)


def fuzz_operation(
    operation: Any,
    role: str,
    base_url: str,
    session: requests.Session,
    tally: Tally,
    *,
    max_examples: int,
    mode: GenerationMode,
) -> None:
    """Up to ``max_examples`` generated requests of one operation as ``role``; deterministic
    (derandomized: the same document gives the same cases)."""
    token = ROLES[role]
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    @given(case=case_strategy(operation, mode))
    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"} | headers
        tally.cases[role] += 1
        tally.cases_by_operation[operation.label] += 1
        tally.cases_by_mode[(role, mode.value)] += 1
        try:
            response = case.call(base_url=base_url, session=session, timeout=30)
        except requests.RequestException as exc:
            tally.transport_errors += 1
            finding = Finding(operation.label, role, mode.value, "transport", None, type(exc).__name__, str(exc), "")
            tally.record(finding)
            return
        tally.statuses[(role, response.status_code)] += 1
        refused = refused_status(role, operation)
        if refused is not None and response.status_code != refused:
            tally.refusals_missed += 1
            message = f"expected {refused}, got {response.status_code}: {response.text[:300]}"
            curl = case.as_curl_command(headers=headers)
            status = response.status_code
            tally.record(Finding(operation.label, role, mode.value, "auth", status, "not refused", message, curl))
        try:
            case.validate_response(
                response, checks=list(CHECKS), headers=headers, transport_kwargs={"base_url": base_url}
            )
        except FailureGroup as group:
            _count(group.exceptions, case, operation, role, mode, headers, response.status_code, tally)
        except Failure as failure:
            _count([failure], case, operation, role, mode, headers, response.status_code, tally)

    try:
        run()
    except Unsatisfiable:  # nothing of this operation can be made invalid (or valid): no cases
        pass


def _count(
    failures: Any,
    case: Any,
    operation: Any,
    role: str,
    mode: GenerationMode,
    headers: dict[str, str],
    status: int,
    tally: Tally,
) -> None:
    kinds = set()
    for failure in failures:
        kind = kind_of(failure)
        kinds.add(kind)
        curl = case.as_curl_command(headers=headers)
        tally.record(Finding(operation.label, role, mode.value, kind, status, failure.title, failure.message, curl))
    # Per request, not per failed check: one bad response counts once in each figure.
    tally.server_errors += "5xx" in kinds or isinstance(failures, ServerError)
    tally.schema_violations += bool(kinds & SCHEMA_KINDS)
    tally.accepted_invalid += "accepted invalid data" in kinds


def fuzz_all(
    base_url: str,
    *,
    max_examples: int,
    roles: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Tally:
    """Every operation × role × mode (the benchmark); the tests parametrize the same calls."""
    schema = load_schema()
    tally = Tally()
    began = time.perf_counter()
    with requests.Session() as session:
        for operation in operations(schema):
            for role in roles or list(ROLES):
                for mode in modes_for(operation):
                    fuzz_operation(operation, role, base_url, session, tally, max_examples=max_examples, mode=mode)
                if progress is not None:
                    progress(f"{operation.label} as {role}: {tally.cases_by_operation[operation.label]} cases so far")
    tally.seconds = time.perf_counter() - began
    return tally


def modes_for(operation: Any) -> list[GenerationMode]:
    return (
        [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if can_be_invalid(operation) else [GenerationMode.POSITIVE]
    )


@dataclass
class Settled:
    """The service after fuzzing, once every table was resumed and had loaded what it had."""

    tables: int
    acknowledged: int  # updates acknowledged (sequence numbers handed out), all tables
    loaded: int
    failed_loads: int  # load attempts that failed
    quarantined: int  # batches set aside

    @property
    def ok(self) -> bool:
        return self.loaded == self.acknowledged and self.failed_loads == 0 and self.quarantined == 0


def settle(url: str, service: LoaderService, session: requests.Session, timeout: float = 60.0) -> Settled:
    """Resume every table (the fuzzer pauses some), wait until nothing is pending, and count."""
    auth = {"Authorization": f"Bearer {OPERATOR}"}

    def statuses() -> list[dict[str, Any]]:
        return session.get(f"{url}/v1/tables", headers=auth, timeout=30).json()["tables"]

    for table in list(service.intake.tables):
        session.post(f"{url}/v1/admin/tables/{table}/resume", headers=auth, timeout=30).raise_for_status()
    deadline = time.monotonic() + timeout
    while not all(s["pending_updates"] == 0 and not s["running"] for s in statuses()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    final = statuses()
    return Settled(
        tables=len(final),
        acknowledged=sum(s["last_sequence"] for s in final),
        loaded=sum(s["last_loaded_sequence"] for s in final),
        failed_loads=sum(s["failures"] for s in final),
        quarantined=len(service.quarantine.entries()),
    )
