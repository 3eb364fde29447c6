"""Whose fault a failed load is: the batch's (retried, then set aside in quarantine so the
table's other updates load), or the world's (a full or read-only disk, a Spark server that
is gone: retried with back-off for as long as it takes, never quarantined).

One predicate, so that the dispatcher, the worker processes' classification of the errors
they send back, and any later kind of failure agree on it.
"""

from __future__ import annotations

from loader.core.durable_files import environmental
from loader.loading.spark import spark_unreachable


def batch_at_fault(error: BaseException) -> bool:
    """True when retrying the same batch can only fail the same way, as far as the loader
    can tell: what counts toward quarantine."""
    return not (environmental(error) or spark_unreachable(error))
