"""The frames between an acceptor process and the service, over a local stream socket.

One connection carries one request at a time (the acceptor keeps a pool of them), so a
frame needs no request id::

    frame     u64 payload length | u8 kind | payload          (little-endian)

Kinds, acceptor to service:

- ``K`` the secret the service gave the acceptor at its start (first frame of a connection;
  a wrong one closes it). Answer ``k``, empty.
- ``C`` the catalog: answer ``c``, JSON ``{"tables": {name: {"schema", "new_fields", "fingerprint"}}}``.
- ``S`` checked updates: JSON head (``route``, ``key``, ``hash``, ``began``, ``updates``: each
  ``table``, ``data_until``, ``fingerprint``, ``size``) then each update's rows as one Arrow
  IPC record batch message of ``size`` bytes (the service has the schema; the WAL writes
  these bytes as they are). Answer ``r``, JSON ``status``, ``content``, ``headers``
  (or ``stale``: the acceptor then sends the request as it came, ``A``).
- ``A`` an HTTP request as it came: JSON head (the ASGI scope's fields), then a ``b`` frame
  with its body. Answer ``h`` (JSON ``status`` and ``headers``), any number of ``b`` (body
  bytes), ``e``; a connection closed before ``e`` is an answer cut short (the acceptor then
  drops the client's connection, as a server would).

A head is ``u32 length | UTF-8 JSON``. Why this and not HTTP between the two: the service
reads a checked update with two ``readexactly`` calls and no parser, which is the point of
the acceptors; and JSON heads keep the frames readable when debugging.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

FRAME = struct.Struct("<QB")
_U32 = struct.Struct("<I")
#: The secret's length: a first frame of any other length is refused before it is read.
SECRET_BYTES = 32

HELLO, CATALOG, CHECKED, RAW = b"K", b"C", b"S", b"A"
WELCOME, TABLES, RESULT, START, BODY, END = b"k", b"c", b"r", b"h", b"b", b"e"


class LinkClosed(ConnectionError):
    """The other side closed the connection (or sent a frame that cannot be one)."""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return FRAME.pack(len(payload), kind[0]) + payload


def with_head(head: dict[str, Any], *parts: bytes) -> bytes:
    """A payload: the JSON head, then ``parts`` as they are."""
    encoded = json.dumps(head, separators=(",", ":")).encode()
    return b"".join((_U32.pack(len(encoded)), encoded, *parts))


def split_head(payload: bytes | memoryview) -> tuple[dict[str, Any], memoryview]:
    """A payload's JSON head and what follows it (not copied)."""
    view = memoryview(payload)
    (size,) = _U32.unpack_from(view)
    return json.loads(bytes(view[4 : 4 + size])), view[4 + size :]


async def read_frame(reader: asyncio.StreamReader, limit: int | None = None) -> tuple[bytes, bytes]:
    """The next frame's kind and payload; LinkClosed at the end of the stream, or for a frame
    longer than ``limit`` (before reading it)."""
    try:
        size, kind = FRAME.unpack(await reader.readexactly(FRAME.size))
        if limit is not None and size > limit:
            raise LinkClosed(f"a frame of {size} bytes, more than the {limit} allowed")
        payload = await reader.readexactly(size) if size else b""
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise LinkClosed(str(exc) or "connection closed") from None
    return bytes((kind,)), payload
