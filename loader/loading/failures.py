"""Whose fault a failed load is: the batch's (retried, then set aside in quarantine so the
table's other updates load), the world's (a full or read-only disk, a Spark server that
is gone: retried with back-off for as long as it takes, never quarantined), or the table's
(it declares something the loader's writes cannot honour, or it changed under the load:
retried with back-off, never quarantined, since another batch would fail the same way).

One predicate, so that the dispatcher, the worker processes' classification of the errors
they send back, and any later kind of failure agree on it.
"""

from __future__ import annotations

from typing import Literal

from loader.core.durable_files import environmental
from loader.core.errors import caused_by, causes
from loader.loading.spark import spark_unreachable

#: Why a table's loads are refused (``loader_table_writes_refused{reason}``): the table is
#: append-only and the load would change rows; it needs a writer feature the loader does
#: not honour; it declares a rule (a CHECK constraint, an invariant, a generation
#: expression) that the loader's engines cannot evaluate.
RefusalReason = Literal["append_only", "writer_feature", "rule_unsupported"]
REFUSAL_REASONS: tuple[RefusalReason, ...] = ("append_only", "writer_feature", "rule_unsupported")


class TableRefusesWrites(RuntimeError):
    """The table, as it is now, must not be written by this load's kind of write: the loader
    stops loading it (each retry checks again, so the table loads once it is fixed) rather
    than commit what other writers of the table would reject.

    Its message names what the table declares and what to do about it.
    """

    def __init__(self, message: str, reason: RefusalReason, table: str | None = None) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason
        self.table = table


class TableChanged(RuntimeError):
    """Another writer changed the table's protocol or metadata between the loader's check of
    the table's rules and its commit; the commit was refused, and the retry checks the rules
    as they are now."""


def table_refusal(error: BaseException) -> TableRefusesWrites | None:
    """The table-level refusal among ``error``'s causes, if the load failed for one."""
    return next((e for e in causes(error) if isinstance(e, TableRefusesWrites)), None)


def table_at_fault(error: BaseException) -> bool:
    """True when the table (not the batch) is why the load failed: refused, or changed under it."""
    return caused_by(error, lambda e: isinstance(e, TableRefusesWrites | TableChanged))


def batch_at_fault(error: BaseException) -> bool:
    """True when retrying the same batch can only fail the same way, as far as the loader
    can tell: what counts toward quarantine."""
    return not (environmental(error) or spark_unreachable(error) or table_at_fault(error))


def updates_at_fault(error: BaseException) -> dict[int, str]:
    """The updates a failure names as the ones to blame (each holding a row that breaks a rule
    the table declares), each with why, when it names any: such a fault lasts, and where it
    is is known, so each of them is set aside at once and the batch's other updates load,
    rather than the batch being retried and bisected."""
    for cause in causes(error):
        named = getattr(cause, "updates_at_fault", None)
        if isinstance(named, dict) and named:
            return {int(seq): str(why) for seq, why in named.items()}
    return {}


class UpdateAtFault(ValueError):
    """Why an update is set aside without a load of its own: an earlier failed load named it
    (``updates_at_fault``); its message is the one the failure gave for it."""
