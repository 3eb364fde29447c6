"""Errors the service reports to clients: each carries its HTTP status and says what to do.
Also the errors it anticipates at start (``StartError``), and how the loader tells what
caused a failure (``caused_by``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its chain of causes (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def caused_by(error: BaseException, test: Callable[[BaseException], bool]) -> bool:
    """True when ``error`` or anything in its chain of causes passes ``test``: a Spark job's
    or a library's error often wraps the one that tells what happened."""
    return any(test(e) for e in causes(error))


class StartError(Exception):
    """An error the loader anticipates while it starts (another instance on the same data,
    no Java, a Spark server that will not start): its message says what is wrong and what
    to do, so a command prints it alone and exits non-zero, with no stack trace."""


class ServiceError(Exception):
    status: int = 500
    code: str = "internal"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.details}


class BadRequest(ServiceError):
    status, code = 400, "bad_request"


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class Forbidden(ServiceError):
    status, code = 403, "forbidden"


class NotFound(ServiceError):
    status, code = 404, "not_found"


class Conflict(ServiceError):
    status, code = 409, "conflict"


class Gone(ServiceError):
    status, code = 410, "gone"


class TooLarge(ServiceError):
    status, code = 413, "payload_too_large"


class Unsupported(ServiceError):
    status, code = 415, "unsupported_media_type"


class Invalid(ServiceError):
    status, code = 422, "invalid"


class Unavailable(ServiceError):
    status, code = 503, "unavailable"

    def __init__(self, message: str, retry_after: float = 1.0, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after


class WalWriteFailed(Unavailable):
    """The WAL write of an update failed after it was queued: it is not accepted, but a crash
    before the log is healed may still replay it (so files it names must stay)."""


def unknown_table(table: str) -> NotFound:
    """The 404 for a well-formed name that no registered table has."""
    return NotFound(f"table {table!r} does not exist; register it with POST /v1/admin/tables", table=table)


def retired_table(table: str, state: str) -> Gone:
    """The 410 for updates of a table an operator retired (``state``: retiring or retired)."""
    return Gone(
        f"table {table!r} is {state} (DELETE /v1/admin/tables/{table}) and takes no more updates; stop sending "
        "them, or register the name again as a new table with POST /v1/admin/tables",
        table=table,
        state=state,
    )
