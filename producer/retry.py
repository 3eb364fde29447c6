"""Which answers a producer retries, and how long it waits before the next attempt.

Retried: transport errors and timeouts (the update may have landed: the retry carries the
same Idempotency-Key, so the service answers it once), 429 and 503 (the service asks to
come back later, after Retry-After), and 500, 502, 504 (a server or a proxy in front of it
failed mid-way, as the AWS SDKs retry them). Never another 4xx: it would be refused again
(``RequestRefused`` carries the service's message).

The wait is capped exponential back-off with full jitter (a uniform draw below
``min(cap, base * 2**attempt)``), so producers that failed together do not come back
together; a Retry-After is a floor under it.
"""

from __future__ import annotations

import email.utils
import random
import time

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


def retried(status: int) -> bool:
    return status in RETRIED_STATUSES


def retry_after(header: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date); None if absent
    or unreadable."""
    if not header:
        return None
    header = header.strip()
    if header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff(attempt: int, base: float, cap: float, rng: random.Random, floor: float | None = None) -> float:
    """The wait before attempt ``attempt + 1`` (``attempt`` >= 1 failed so far)."""
    ceiling = min(cap, base * 2 ** min(attempt - 1, 62))
    wait = rng.uniform(0.0, ceiling)
    return max(wait, floor) if floor is not None else wait
