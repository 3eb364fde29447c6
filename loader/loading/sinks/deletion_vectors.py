"""Delta deletion vectors: the bytes the protocol specifies, written and read.

A deletion vector (DV) marks rows of one data file as deleted without rewriting the file
(Delta protocol, "Deletion Vectors" and appendix "Deletion Vector Format"). Its descriptor
sits in the file's ``add`` action; the rows are a RoaringBitmapArray:

- the bitmap: magic ``1681511377`` (int32, little endian), the number of 32-bit bitmaps
  (int64 LE), then per bitmap its high 32 bits (int32 LE) and the bitmap in Roaring's
  portable serialization (pyroaring writes and reads it);
- a DV file ``deletion_vector_<uuid>.bin`` in the table's root: a format version byte
  (1), then per DV its size (int32, big endian), the bitmap, and the bitmap's CRC-32
  (big endian); a descriptor's ``offset`` points at the size field;
- the descriptor names the file by its UUID in Z85 (``storageType`` ``u``, an optional
  random prefix before the 20 characters), or holds the bitmap itself in Z85 (``i``), or an
  absolute path (``p``).

Why by hand: deltalake 1.6.6 reads DVs (its DataFusion scan applies them) but writes none
and exposes neither descriptors nor a writer; Python's ``base64`` has no Z85 alphabet.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyroaring import BitMap

MAGIC = 1681511377
FORMAT_VERSION = 1
Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(Z85_ALPHABET)}
#: Length of a UUID in Z85 (16 bytes).
UUID_CHARS = 20


class DeletionVectorError(ValueError):
    """A deletion vector that cannot be read as the protocol specifies (damaged or unsupported)."""


def z85_encode(data: bytes) -> str:
    """Z85 (ZeroMQ RFC 32) of ``data``, whose length must be a multiple of 4."""
    if len(data) % 4:
        raise ValueError("Z85 encodes whole 4-byte words; pad the data first")
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chars = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chars.append(Z85_ALPHABET[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 text of {len(text)} characters is not whole 5-character groups")
    words = []
    for i in range(0, len(text), 5):
        value = 0
        for char in text[i : i + 5]:
            digit = _Z85_VALUE.get(char)
            if digit is None:
                raise DeletionVectorError(f"{char!r} is not a Z85 character")
            value = value * 85 + digit
        if value >= 1 << 32:
            raise DeletionVectorError("a Z85 group exceeds 32 bits")
        words.append(value)
    return struct.pack(f">{len(words)}I", *words)


def serialize(rows: BitMap) -> bytes:
    """``rows`` (row positions of one data file) as a RoaringBitmapArray."""
    # Positions fit 32 bits (a Parquet file of 4 billion rows is not written here), so one
    # bitmap with high bits 0; an empty set has no bitmap at all.
    bitmaps = [rows] if rows else []
    head = struct.pack("<iq", MAGIC, len(bitmaps))
    return head + b"".join(struct.pack("<i", 0) + bitmap.serialize() for bitmap in bitmaps)


def deserialize(data: bytes) -> BitMap:
    """A RoaringBitmapArray's rows (as one bitmap: positions above 2^32 are refused)."""
    if len(data) < 12:
        raise DeletionVectorError("a deletion vector shorter than its header")
    magic, count = struct.unpack_from("<iq", data)
    if magic != MAGIC:
        raise DeletionVectorError(f"deletion vector magic {magic}, expected {MAGIC}")
    rows = BitMap()
    view = memoryview(data)[12:]
    for _ in range(count):
        (high,) = struct.unpack_from("<i", view)
        if high != 0:
            raise DeletionVectorError("a deletion vector with row positions of 2^32 and above is not supported")
        bitmap = BitMap.deserialize(bytes(view[4:]))
        rows |= bitmap
        view = view[4 + len(bitmap.serialize()) :]
    return rows


@dataclass(frozen=True)
class Descriptor:
    """A deletion vector descriptor, as the ``deletionVector`` field of ``add``/``remove``."""

    storage_type: str
    path_or_inline: str
    offset: int | None
    size: int
    cardinality: int

    @classmethod
    def from_log(cls, value: Mapping[str, Any]) -> Descriptor:
        return cls(
            str(value["storageType"]),
            str(value["pathOrInlineDv"]),
            None if value.get("offset") is None else int(value["offset"]),
            int(value["sizeInBytes"]),
            int(value["cardinality"]),
        )

    def to_log(self) -> dict[str, Any]:
        out: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline}
        if self.offset is not None:
            out["offset"] = self.offset
        return out | {"sizeInBytes": self.size, "cardinality": self.cardinality}

    def file(self, root: Path) -> Path | None:
        """The DV file this descriptor reads from (None: inline)."""
        if self.storage_type == "i":
            return None
        if self.storage_type == "p":
            parsed = urlparse(self.path_or_inline)
            return Path(unquote(parsed.path if parsed.scheme else self.path_or_inline))
        if self.storage_type != "u":
            raise DeletionVectorError(f"deletion vector storage type {self.storage_type!r} is not in the protocol")
        prefix, encoded = self.path_or_inline[:-UUID_CHARS], self.path_or_inline[-UUID_CHARS:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return root / prefix / name if prefix else root / name


def read(root: Path, descriptor: Descriptor) -> BitMap:
    """The rows ``descriptor`` deletes, checked (size, checksum, cardinality)."""
    path = descriptor.file(root)
    if path is None:
        rows = deserialize(z85_decode(descriptor.path_or_inline)[: descriptor.size])
    else:
        with open(path, "rb") as handle:
            handle.seek(descriptor.offset or 0)
            head = handle.read(4)
            data = handle.read(descriptor.size)
            checksum = handle.read(4)
        if len(head) < 4 or struct.unpack(">i", head)[0] != descriptor.size or len(data) != descriptor.size:
            raise DeletionVectorError(f"the deletion vector at {path}@{descriptor.offset} is cut or mis-sized")
        if len(checksum) < 4 or struct.unpack(">I", checksum)[0] != zlib.crc32(data):
            raise DeletionVectorError(f"the deletion vector at {path}@{descriptor.offset} fails its checksum")
        rows = deserialize(data)
    if len(rows) != descriptor.cardinality:
        raise DeletionVectorError(
            f"a deletion vector holds {len(rows)} rows where its descriptor says {descriptor.cardinality}"
        )
    return rows


def write_file(root: Path, vectors: Iterable[BitMap]) -> tuple[Path, list[Descriptor]]:
    """One DV file in ``root`` holding each of ``vectors``, written and fsynced, with their
    descriptors in order. Readers find it only through a commit naming it; an unnamed one
    (a crash before the commit) is vacuum's to delete."""
    ident = uuid.uuid4()
    path = root / f"deletion_vector_{ident}.bin"
    name = z85_encode(ident.bytes)
    chunks, descriptors, offset = [bytes([FORMAT_VERSION])], [], 1
    for rows in vectors:
        data = serialize(rows)
        chunks.append(struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data)))
        descriptors.append(Descriptor("u", name, offset, len(data), len(rows)))
        offset += len(data) + 8
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(b"".join(chunks))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path, descriptors
