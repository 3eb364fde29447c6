"""On-disk encoding of the write-ahead log: segment headers, frames and records.

Kept apart from ``loader.durability.wal`` (threads, fsync, truncation) so the format can be read,
tested and dumped by tools without starting a writer.

Segment file ``wal-<first record index, 20 digits>.log``::

    header   24 bytes   magic b"LDRWAL\\r\\n" | u16 version (1) | u16 flags (0)
                        | u64 index of the segment's first record | u32 crc32 of the 20 bytes before
    frame*              u32 payload length | u32 crc32(payload) | payload

All integers little-endian. A payload is::

    u32 header length | header (UTF-8 JSON object) | body (Arrow IPC stream, or nothing)

with the JSON keys ``table`` (str), ``seq`` (int), ``release`` (float), ``rows`` (bool:
a body follows), ``files`` ([[path, format, size], ...]), ``key`` / ``hash`` (the
Idempotency-Key and request hash, or null), ``response`` (object or null),
``created_at`` (Unix seconds) and ``more``.

``more`` makes one ``append()`` call atomic: it counts the records of the same call that
follow this one (0 on the call's last record). A call's records are acknowledged together
after one fsync, so a crash can leave the first records of a call on disk without its
last: replay drops such an unfinished group along with the torn frame, and a reader
never sees part of a request. A group never spans two segments.

Why these choices: the length + CRC frame lets replay tell a torn tail (a crash during
the last write) from an intact record without trusting anything else on disk; a zero
length is invalid, so a zero-filled tail left by the file system reads as torn rather
than as empty records; the JSON header is readable with ``strings`` when debugging, and
Arrow IPC keeps the row payload columnar, typed and schema-carrying at no parsing cost.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from loader.core.updates import MAX_RECORD_BYTES, FileFormat, FileRef, Update, WalRecord

MAGIC = b"LDRWAL\r\n"
VERSION = 1
SEGMENT_HEADER = struct.Struct("<8sHHQ")  # + u32 crc of these 20 bytes
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size + 4
FRAME_HEADER = struct.Struct("<II")
FRAME_HEADER_SIZE = FRAME_HEADER.size
_U32 = struct.Struct("<I")
#: Smallest valid payload: the header-length word plus "{}".
MIN_PAYLOAD = _U32.size + 2
SEGMENT_PREFIX, SEGMENT_SUFFIX = "wal-", ".log"


class WalError(Exception):
    """Base class of the WAL's errors."""


class WalCorruptError(WalError):
    """Acknowledged data is damaged (or the file is not a WAL segment): replay cannot go on.

    Raised for damage that a crash during a write cannot explain: a bad frame in a segment
    that is not the last one, a CRC-valid record that does not decode, a foreign header.
    The message names the file and byte offset so an operator can inspect or restore it.
    """

    def __init__(self, path: Path | str, offset: int, reason: str) -> None:
        super().__init__(f"WAL segment {path} is corrupt at byte {offset}: {reason}")
        self.path = Path(path)
        self.offset = offset
        self.reason = reason


def segment_name(first_index: int) -> str:
    return f"{SEGMENT_PREFIX}{first_index:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """First record index encoded in a segment file name, or None for other files."""
    if not (name.startswith(SEGMENT_PREFIX) and name.endswith(SEGMENT_SUFFIX)):
        return None
    digits = name[len(SEGMENT_PREFIX) : -len(SEGMENT_SUFFIX)]
    return int(digits) if len(digits) == 20 and digits.isdigit() else None


def encode_segment_header(first_index: int) -> bytes:
    head = SEGMENT_HEADER.pack(MAGIC, VERSION, 0, first_index)
    return head + _U32.pack(zlib.crc32(head))


def decode_segment_header(data: bytes) -> int | None:
    """First record index from a segment header; None when the header is torn.

    Torn means a crash while the segment was being created: too short, all zeros, or a
    CRC mismatch. A complete header that is not ours raises ValueError.
    """
    if len(data) < SEGMENT_HEADER_SIZE or not any(data):
        return None
    head, (crc,) = data[: SEGMENT_HEADER.size], _U32.unpack_from(data, SEGMENT_HEADER.size)
    magic, version, _flags, first_index = SEGMENT_HEADER.unpack(head)
    if magic != MAGIC:
        raise ValueError(f"not a WAL segment (magic {magic!r})")
    if zlib.crc32(head) != crc:
        return None
    if version != VERSION:
        raise ValueError(f"unsupported WAL format version {version} (this build reads {VERSION})")
    return int(first_index)


#: One encoder for every header: ``json.dumps`` with options builds a new one per call.
_HEADER_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: The Arrow IPC stream's end-of-stream marker (continuation token, zero length).
_IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
#: Each schema's IPC schema message, serialized once: a table's updates share it.
_SCHEMA_MESSAGES: dict[pa.Schema, bytes] = {}


def rows_to_ipc(rows: pa.Table) -> bytes:
    """An Arrow IPC stream of ``rows``, byte for byte what ``pa.ipc.new_stream`` writes, from
    the schema's message (cached) and each batch's: a quarter of the writer's cost, and
    this runs on the event loop for every update."""
    head = schema_message(rows.schema)
    return b"".join([head, *(batch.serialize().to_pybytes() for batch in rows.to_batches()), _IPC_EOS])


def schema_message(schema: pa.Schema) -> bytes:
    """The schema's IPC message (cached: a table's updates share it)."""
    head = _SCHEMA_MESSAGES.get(schema)
    if head is None:
        if len(_SCHEMA_MESSAGES) >= 1024:
            _SCHEMA_MESSAGES.clear()
        head = _SCHEMA_MESSAGES[schema] = schema.serialize().to_pybytes()
    return head


def encode_group(records: Sequence[WalRecord]) -> bytes:
    """Frames for the records of one append() call, ``more`` counting down to 0.

    Raises TypeError/ValueError for a record that cannot be written (a response that is
    not JSON, an oversized payload), before anything reaches the disk.
    """
    frames: list[bytes] = []
    for i, record in enumerate(records):
        update = record.update
        header = {
            "table": update.table,
            "seq": int(update.seq),
            "release": float(update.release),
            "rows": update.rows is not None,
            "files": [[f.path, FileFormat(f.format).value, int(f.size)] for f in update.files],
            "key": record.idempotency_key,
            "hash": record.request_hash,
            "response": record.response,
            "created_at": float(record.created_at),
            "more": len(records) - 1 - i,
        }
        head = _HEADER_JSON.encode(header).encode()
        if update.rows is None:
            body = b""
        elif record.rows_message is not None:  # as received: the stream rows_to_ipc would write
            body = b"".join((schema_message(update.rows.schema), record.rows_message, _IPC_EOS))
        else:
            body = rows_to_ipc(update.rows)
        payload = b"".join((_U32.pack(len(head)), head, body))
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(
                f"WAL record of {update.table!r} seq {update.seq} is {len(payload)} bytes; "
                f"the limit is {MAX_RECORD_BYTES}"
            )
        frames.append(FRAME_HEADER.pack(len(payload), zlib.crc32(payload)))
        frames.append(payload)
    return b"".join(frames)


def decode_header(payload: bytes) -> dict[str, Any]:
    """The JSON header of a CRC-valid payload; ValueError if it is not one we wrote."""
    (size,) = _U32.unpack_from(payload)
    if _U32.size + size > len(payload):
        raise ValueError(f"header length {size} exceeds the {len(payload)}-byte payload")
    header = json.loads(payload[_U32.size : _U32.size + size])
    if (
        not isinstance(header, dict)
        or not isinstance(header.get("table"), str)
        or not isinstance(header.get("seq"), int)
        or not isinstance(header.get("more"), int)
    ):
        raise ValueError("record header lacks table/seq/more")
    return header


def decode_record(payload: bytes) -> tuple[WalRecord, int]:
    """(record, more) from a CRC-valid payload; ValueError if it does not decode."""
    header = decode_header(payload)
    (size,) = _U32.unpack_from(payload)
    body = payload[_U32.size + size :]
    rows: pa.Table | None = None
    if header["rows"]:
        rows = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    elif body:
        raise ValueError(f"{len(body)}-byte body on a record without rows")
    files = tuple(FileRef(path, FileFormat(fmt), int(size)) for path, fmt, size in header["files"])
    update = Update(header["table"], header["seq"], float(header["release"]), rows, files)
    record = WalRecord(update, header["key"], header["hash"], header["response"], float(header["created_at"]))
    return record, header["more"]


class FrameDamage(Exception):
    """A frame that cannot be read: the torn tail of a crash, or corruption."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


def iter_frames(f: BinaryIO, start: int, end: int) -> Iterator[tuple[int, int, bytes]]:
    """Yield (offset, end offset, payload) of the frames in ``[start, end)``.

    Raises FrameDamage at the first frame that is short, has an impossible length or a
    CRC mismatch; what precedes it has been yielded.
    """
    f.seek(start)
    pos = start
    while pos < end:
        head = f.read(FRAME_HEADER_SIZE)
        if pos + FRAME_HEADER_SIZE > end or len(head) < FRAME_HEADER_SIZE:
            raise FrameDamage(pos, f"short frame header ({end - pos} bytes left)")
        length, crc = FRAME_HEADER.unpack(head)
        if not MIN_PAYLOAD <= length <= MAX_RECORD_BYTES:
            raise FrameDamage(pos, f"bad frame length {length}")
        stop = pos + FRAME_HEADER_SIZE + length
        if stop > end:
            raise FrameDamage(pos, f"short frame ({length}-byte payload, {end - pos - FRAME_HEADER_SIZE} bytes left)")
        payload = f.read(length)
        if len(payload) != length:
            raise FrameDamage(pos, f"short frame (read {len(payload)} of {length} bytes)")
        if zlib.crc32(payload) != crc:
            raise FrameDamage(pos, "crc mismatch")
        yield pos, stop, payload
        pos = stop


@dataclass(slots=True)
class SegmentScan:
    """What one pass over a segment learned: where valid data ends and what it holds."""

    path: Path
    #: None when the header itself is torn (the file holds nothing usable).
    first_index: int | None
    file_size: int
    #: Offset just after the last complete group: the segment's valid length.
    end: int
    records: int = 0
    max_seq: dict[str, int] = field(default_factory=dict)
    keys: int = 0
    #: First damaged frame, if valid data stops before the end of the file.
    damage: FrameDamage | None = None
    #: Intact records after ``end`` discarded because their group was not finished.
    dropped_records: int = 0


def scan_segment(path: Path) -> SegmentScan:
    """Check every frame and group of a segment without decoding row bodies.

    Returns damage rather than raising when a crash mid-write could explain it (the
    caller decides: a torn tail of the last segment is cut, anything else is corrupt).
    Raises WalCorruptError for damage no crash explains.
    """
    size = path.stat().st_size
    with open(path, "rb", buffering=1 << 20) as f:
        try:
            first_index = decode_segment_header(f.read(SEGMENT_HEADER_SIZE))
        except ValueError as exc:
            raise WalCorruptError(path, 0, str(exc)) from None
        if first_index is None:
            return SegmentScan(path, None, size, 0, damage=FrameDamage(0, "torn segment header"))
        scan = SegmentScan(path, first_index, size, SEGMENT_HEADER_SIZE)
        group: list[tuple[str, int, bool]] = []
        expect_more: int | None = None
        try:
            for offset, stop, payload in iter_frames(f, SEGMENT_HEADER_SIZE, size):
                try:
                    header = decode_header(payload)
                except ValueError as exc:  # CRC-valid, so not a torn write
                    raise WalCorruptError(path, offset, f"undecodable record: {exc}") from None
                more = header["more"]
                if (expect_more is not None and more != expect_more) or more < 0:
                    raise WalCorruptError(path, offset, f"record says {more} more in its group, expected {expect_more}")
                group.append((header["table"], header["seq"], header.get("key") is not None))
                if more:
                    expect_more = more - 1
                    continue
                for table, seq, has_key in group:
                    if seq <= scan.max_seq.get(table, -1 << 63):
                        raise WalCorruptError(
                            path, offset, f"seq {seq} of {table!r} is not after {scan.max_seq[table]}"
                        )
                    scan.max_seq[table] = seq
                    scan.keys += has_key
                scan.records += len(group)
                scan.end, group, expect_more = stop, [], None
        except FrameDamage as damage:
            scan.damage = damage
        if group:  # the file ended (or broke) inside a group
            scan.dropped_records = len(group)
            if scan.damage is None:
                scan.damage = FrameDamage(size, f"group unfinished: {len(group)} record(s) without the rest")
        return scan


def read_records(path: Path, start: int, end: int) -> Iterator[WalRecord]:
    """Decode the records of ``[start, end)`` of a scanned segment, in order."""
    with open(path, "rb", buffering=1 << 20) as f:
        try:
            for offset, _stop, payload in iter_frames(f, start, end):
                try:
                    record, _more = decode_record(payload)
                except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
                    raise WalCorruptError(path, offset, f"undecodable record: {exc}") from None
                yield record
        except FrameDamage as damage:  # checked at open, so the file changed under us
            raise WalCorruptError(path, damage.offset, damage.reason) from None
