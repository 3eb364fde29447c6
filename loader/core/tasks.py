"""Work that must run to its end even when the request that started it goes away.

An append under way must still store its answer under the Idempotency-Key, or the
producer's retry with that key would submit the updates a second time; the links a
quarantine retry makes, its submission and its tombstone belong together. A cancelled
request (client gone) therefore still sees its ``CancelledError``, but the work goes on
as a task of its own whose outcome is only logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


async def shielded(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` as its own task, which the caller's cancellation does not cancel."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_note_abandoned)
    return await asyncio.shield(task)


def _note_abandoned(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:  # (also marks it retrieved)
        log.debug("work whose caller had gone ended in %r", task.exception())
