"""The acceptors' frames (api/acceptors/wire.py): what one side writes the other reads, and a
stream that ends mid-frame is a closed link, not a short frame."""

from __future__ import annotations

import asyncio

import pytest

from api.acceptors.wire import CHECKED, LinkClosed, frame, read_frame, split_head, with_head


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_a_frame_with_a_head_and_parts_reads_back_whole() -> None:
    payload = with_head({"route": "/v1/updates", "updates": [{"size": 3}]}, b"abc", b"")

    async def read() -> tuple[bytes, bytes]:
        return await read_frame(_reader(frame(CHECKED, payload) + frame(b"e")))

    kind, got = asyncio.run(read())
    head, rest = split_head(got)
    assert kind == CHECKED and head == {"route": "/v1/updates", "updates": [{"size": 3}]} and bytes(rest) == b"abc"


@pytest.mark.parametrize("cut", [0, 3, 7])
def test_a_stream_cut_mid_frame_is_a_closed_link(cut: int) -> None:
    data = frame(CHECKED, with_head({"a": 1}, b"xyz"))[:cut]

    async def read() -> None:
        await read_frame(_reader(data))

    with pytest.raises(LinkClosed):
        asyncio.run(read())
