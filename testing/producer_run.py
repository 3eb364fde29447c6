"""A durable producer as its own process, for the producer's crash tests:

    python -m testing.producer_run URL TOKEN STATE_DIR TABLE COUNT

sends rows ``{"n": k}`` for k from where it left off to COUNT - 1, one ``send`` each, with
the next k as the send's checkpoint (journaled with the rows in one write: what a file-drop
producer records as its input position). Killed at any moment and started again, it
resumes at the producer's checkpoint and must load every k exactly once.
"""

from __future__ import annotations

import sys
from pathlib import Path

from producer import LoaderProducer


def main(argv: list[str]) -> int:
    url, token, state, table, count = argv[0], argv[1], Path(argv[2]), argv[3], int(argv[4])
    with LoaderProducer(
        url=url, token=token, producer_id="crash-test", state_dir=state, linger=0.005, retry_backoff_max=0.5
    ) as producer:
        for k in range(int(producer.checkpoint or 0), count):
            producer.send(table, [{"n": k}], checkpoint=str(k + 1))
        producer.flush()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
