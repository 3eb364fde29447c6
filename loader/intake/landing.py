"""Updates that name files in the landing directory instead of carrying rows.

Before the update is acknowledged each file is opened inside the landing directory
without following symbolic links (each path component is opened relative to its parent
with O_NOFOLLOW, so a link swapped in between a check and the open cannot redirect it),
copied from that open descriptor into storage the service owns (an in-kernel copy) and
fsynced, and then the *copy* is checked: readable as its format with the table's schema,
in bounded chunks. What was checked is therefore exactly what gets loaded; a file whose size
or modification time changed while it was copied (still being written) is refused with 409,
and after the 202 the producer may delete, rename over or rewrite its landing file.
"Taking" a file means this copy: the landing file itself is never moved, linked or
changed, and a refused update leaves no copy behind.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from loader.core.durable_files import ENVIRONMENTAL_ERRNOS, fsync_directory
from loader.core.errors import BadRequest, Conflict, Invalid, ServiceError, TooLarge, Unavailable
from loader.core.schema import TableSchema
from loader.core.updates import FileFormat, FileRef
from loader.intake.rows import check_partition_values, quote

#: Largest landing file taken by default (``max_landing_file_bytes`` in the configuration).
DEFAULT_MAX_FILE_BYTES = 16 << 30

#: Rows per chunk when a landing file is checked (bounded memory whatever the file's size).
CHUNK_ROWS = 65_536

_EXTENSIONS = {
    ".parquet": FileFormat.parquet,
    ".csv": FileFormat.csv,
    ".json": FileFormat.json,
    ".jsonl": FileFormat.json,
    ".ndjson": FileFormat.json,
}


def _format_of(path: PurePosixPath, declared: str | None) -> FileFormat:
    if declared is not None:
        try:
            return FileFormat(declared)
        except ValueError:
            raise BadRequest(f"file format {quote(declared)} is not one of parquet, csv, json") from None
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise BadRequest(
            f"cannot tell the format of {quote(path.name)} from its extension; name it .parquet/.csv/.json "
            'or give {"path": ..., "format": ...}'
        )
    return fmt


def _conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.Table:
    """Columns by name as the table declares them: missing ones null, unknown ones an error."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    extra = [name for name in table.column_names if name not in schema.names]
    if extra:
        raise ValueError(f"unknown column {extra[0]!r}")
    for name in schema.names:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
    return table.select(schema.names).cast(schema)


def iter_landing_file(path: Path, fmt: FileFormat, schema: pa.Schema) -> Iterator[pa.Table]:
    """A landing file in bounded chunks, typed by the table (the rules Spark applies when loading).

    Streaming keeps a multi-gigabyte feed file from being held in the service's memory
    while intake checks it.
    """
    if fmt is FileFormat.parquet:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS):
            yield _conform(batch, schema)
        return
    if fmt is FileFormat.csv:
        options = pa_csv.ConvertOptions(column_types=schema, include_columns=schema.names, include_missing_columns=True)
        reader = pa_csv.open_csv(path, convert_options=options)
    else:
        parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        reader = pa_json.open_json(path, parse_options=parse)
    for batch in reader:
        yield _conform(batch, schema)


def read_landing_file(path: Path, fmt: FileFormat, schema: pa.Schema) -> pa.Table:
    """The whole file as one table (small files: tests and the Spark-free sink)."""
    return pa.concat_tables([schema.empty_table(), *iter_landing_file(path, fmt, schema)])


def _check_nulls(table: pa.Table, schema: TableSchema, name: str) -> None:
    for column in schema.columns:
        if not column.nullable and table.column(column.name).null_count:
            raise Invalid(
                f"file {name} holds nulls in column {column.name!r}, which is required (not nullable); "
                "nothing of the update was accepted: fix the file and send the whole update again",
                column=column.name,
            )


class _Landing:
    """The landing directory, opened once per request, and the rules for naming files in it."""

    def __init__(self, landing: Path) -> None:
        self.configured = landing.absolute()
        self.root = landing.resolve()

    def relative_parts(self, raw: str) -> tuple[str, ...]:
        """The path's components below the landing directory, checked lexically: no ``..``,
        no NUL, absolute paths only inside the (configured or resolved) landing directory."""
        shown = quote(raw)
        if "\x00" in raw:
            raise BadRequest(
                f"file path {shown} holds a NUL character; name a file in the landing directory {self.root}"
            )
        path = PurePosixPath(raw)
        if path.is_absolute():
            for base in (self.root, self.configured):
                if path.is_relative_to(base):
                    path = path.relative_to(base)
                    break
            else:
                raise BadRequest(
                    f"file {shown} is outside the landing directory {self.root}; put feed files there first"
                )
        parts = tuple(part for part in path.parts if part not in ("", "."))
        if ".." in parts:
            raise BadRequest(
                f"file {shown} is outside the landing directory {self.root} (paths may not hold '..'); "
                "put feed files there first"
            )
        if not parts:
            raise BadRequest(f"file {shown} names the landing directory itself; name a regular file in it")
        return parts

    def open(self, raw: str) -> int:
        """A read-only descriptor of a regular file in the landing directory; BadRequest otherwise."""
        parts = self.relative_parts(raw)
        shown = quote(raw)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            directory = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise BadRequest(
                    f"file {shown} does not exist: the landing directory {self.root} itself is missing "
                    "(operators: create it, or set landing_dir)"
                ) from None
            raise _busy(exc) from None
        try:
            for part in parts[:-1]:
                try:
                    inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=directory)
                except OSError as exc:
                    raise self._refusal(exc, shown, _is_link(part, directory)) from None
                os.close(directory)
                directory = inner
            try:
                # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
                fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=directory)
            except OSError as exc:
                raise self._refusal(exc, shown, _is_link(parts[-1], directory)) from None
        finally:
            os.close(directory)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(mode) else "a pipe, socket or device"
            raise BadRequest(f"file {shown} is {kind}, not a regular file; name a regular file in {self.root}")
        return fd

    def _refusal(self, exc: OSError, shown: str, link: bool) -> ServiceError:
        if exc.errno in _BUSY_ERRNOS:
            return _busy(exc)
        if link or exc.errno == errno.ELOOP:
            return BadRequest(
                f"file {shown} is a symbolic link or passes through one, and links are not followed; "
                f"put the file itself in the landing directory {self.root}"
            )
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return BadRequest(
                f"file {shown} does not exist in the landing directory {self.root}; put the file there first "
                "(paths are relative to it)"
            )
        if exc.errno == errno.ENAMETOOLONG:
            return BadRequest(f"file path {shown} is too long for the filesystem; name a file in {self.root}")
        if exc.errno == errno.EACCES:
            return BadRequest(f"file {shown} cannot be read by the service (permission denied); make it readable")
        return BadRequest(f"file {shown} cannot be opened: {os.strerror(exc.errno or 0)}; check it and send again")


#: The service, not the request, is short of something: retry later.
_BUSY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def _busy(exc: OSError) -> Unavailable:
    return Unavailable(f"the service cannot open landing files now: {os.strerror(exc.errno or 0)}; retry shortly")


def _is_link(name: str, directory: int) -> bool:
    """Whether a component that could not be opened is a symbolic link (O_NOFOLLOW with
    O_DIRECTORY reports a link as ENOTDIR, like a plain file used as a directory)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _copy(source: int, target: int, limit: int) -> int:
    """The first ``limit`` bytes of ``source`` into ``target`` in the kernel (sendfile), bytes
    copied. ``limit`` is the size seen when the file was opened: a producer still appending
    cannot grow the copy past what was measured against the size cap."""
    offset = 0
    while offset < limit:
        try:
            sent = os.sendfile(target, source, offset, min(limit - offset, 1 << 30))
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS) or offset:
                raise
            return _copy_by_reads(source, target, limit)
        if sent == 0:
            break
        offset += sent
    return offset


def _copy_by_reads(source: int, target: int, limit: int) -> int:
    total = 0
    while total < limit and (chunk := os.read(source, min(1 << 20, limit - total))):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]
        total += len(chunk)
    return total


def _spec(spec: Any) -> tuple[str, str | None]:
    if isinstance(spec, str):
        return spec, None
    if isinstance(spec, dict) and isinstance(spec.get("path"), str) and set(spec) <= {"path", "format"}:
        declared = spec.get("format")
        if declared is not None and not isinstance(declared, str):
            raise BadRequest(f"file format {quote(declared)} is not one of parquet, csv, json")
        return spec["path"], declared
    raise BadRequest(f'each entry of "files" is a path string or {{"path": ..., "format": ...}}, not {quote(spec)}')


def accept_files(
    specs: list[Any],
    landing: Path,
    owned: Path,
    schema: TableSchema,
    table: str,
    seen: set[tuple[int, int, str]] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> tuple[FileRef, ...]:
    """Copy every named file into ``owned`` and check the copies: all accepted, or none
    kept (BadRequest/Invalid, and every copy made here removed).

    ``seen`` holds (device, inode, table) of files already named in the same request:
    a file named twice for one table would be loaded twice, so it is refused. A file above
    ``max_file_bytes`` is refused (413) before anything is copied, a file that changes while
    it is copied is a Conflict (409); a full or read-only service disk is Unavailable (503:
    retry later), any other copy failure a BadRequest.
    """
    if not specs:
        raise Invalid(f"update for table {table!r} names no files; name at least one", table=table)
    seen = set() if seen is None else seen
    root = _Landing(landing)
    named = [_spec(spec) for spec in specs]
    formats = [_format_of(PurePosixPath(*root.relative_parts(raw)), declared) for raw, declared in named]
    try:
        owned.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _storage_refusal(exc, owned) from None
    copies: list[Path] = []
    refs: list[FileRef] = []
    arrow = schema.arrow()
    try:
        for (raw, _), fmt in zip(named, formats):
            fd = root.open(raw)
            try:
                info = os.fstat(fd)
                identity = (info.st_dev, info.st_ino, table)
                if identity in seen:
                    raise Invalid(
                        f"file {quote(raw)} is named twice for table {table!r} in this request (its rows would be "
                        "loaded twice); name each file once",
                        table=table,
                    )
                seen.add(identity)
                if info.st_size > max_file_bytes:
                    raise TooLarge(
                        f"file {quote(raw)} is {info.st_size} bytes, above the limit of {max_file_bytes} bytes "
                        "(max_landing_file_bytes); split it into several files or raise the limit",
                        table=table,
                    )
                # The copy's name is the service's own: the producer's name may be long or
                # non-ASCII enough to exceed the filesystem's limit once prefixed.
                target = owned / f"{uuid.uuid4().hex}{_suffix(raw)}"
                copies.append(target)
                size = _copy_into(fd, target, info, raw, owned)
            finally:
                os.close(fd)
            _check_copy(target, fmt, schema, arrow, raw, table)
            refs.append(FileRef(path=str(target), format=fmt, size=size))
        try:
            fsync_directory(owned)
        except OSError as exc:
            raise _storage_refusal(exc, owned) from None
    except BaseException:
        for copy in copies:
            try:
                copy.unlink()
            except OSError:
                pass
        raise
    return tuple(refs)


def _suffix(raw: str) -> str:
    """The file's extension (kept for operators reading the directory), if short and plain."""
    suffix = PurePosixPath(raw).suffix
    return suffix if len(suffix) <= 16 and suffix[1:].isascii() and suffix[1:].isalnum() else ""


def _copy_into(fd: int, target: Path, measured: os.stat_result, raw: str, owned: Path) -> int:
    """The ``measured`` size of ``fd`` into a new, fsynced ``target``; Conflict when the file
    changed meanwhile (a producer still writing it: the copy could end mid-row, and a CSV or
    JSON-lines file cut at a row boundary would still read as valid)."""
    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _storage_refusal(exc, owned) from None
    try:
        try:
            copied = _copy(fd, out, measured.st_size)
            os.fsync(out)
        finally:
            os.close(out)  # (a delayed write error may show only here)
    except OSError as exc:
        raise _copy_refusal(exc, raw, owned) from None
    after = os.fstat(fd)
    if copied != measured.st_size or (after.st_size, after.st_mtime_ns) != (measured.st_size, measured.st_mtime_ns):
        raise Conflict(
            f"file {quote(raw)} changed while it was being copied ({measured.st_size} bytes when opened, "
            f"{after.st_size} after); name a file only once it is completely written, then send the update again"
        )
    return copied


def _copy_refusal(exc: OSError, raw: str, owned: Path) -> ServiceError:
    if exc.errno in ENVIRONMENTAL_ERRNOS:
        return _storage_refusal(exc, owned)
    if exc.errno == errno.EFBIG:
        return TooLarge(f"file {quote(raw)} is larger than the service's file system allows; split it")
    return BadRequest(
        f"file {quote(raw)} could not be copied into the service's storage: {os.strerror(exc.errno or 0)}; check "
        f"that it is readable and send the update again (operators: check the disk holding {owned})"
    )


def _storage_refusal(exc: OSError, owned: Path) -> Unavailable:
    """The service's own file storage failed: not the producer's fault, so retry later."""
    return Unavailable(
        f"the service cannot store landing files in {owned}: {os.strerror(exc.errno or 0)}; nothing was accepted, "
        "retry later (operators: free space or fix the disk)",
        retry_after=5.0,
    )


def _check_copy(path: Path, fmt: FileFormat, schema: TableSchema, arrow: pa.Schema, raw: str, table: str) -> None:
    """The service's own copy, read as Spark will read it; Invalid naming the file otherwise."""
    shown = quote(raw)
    first_row = 0
    try:
        for chunk in iter_landing_file(path, fmt, arrow):
            _check_nulls(chunk, schema, shown)
            check_partition_values(chunk, schema, f"file {shown}", first_row)
            first_row += chunk.num_rows
    except Invalid as exc:
        exc.details.update(table=table, file=raw[:200])
        raise
    except (pa.ArrowException, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise Invalid(
            f"file {shown} cannot be loaded into table {table!r} as {fmt.value} with the table's columns "
            f"{schema.arrow().names}: {reason}; fix the file and send the update again",
            table=table,
            file=raw[:200],
        ) from None


def sweep_copies(owned_dir: Path, keep: set[str]) -> int:
    """Remove copies of landing files that no update refers to: left by a crash between
    the copy and the WAL append, or before a failed WAL group was healed, or by a
    quarantine retry cut short. Call it before intake opens, so no copy is being made."""
    keep = {os.path.realpath(path) for path in keep}
    removed = 0
    for table_dir in owned_dir.glob("*/"):
        for path in table_dir.iterdir():
            if path.is_file() and os.path.realpath(path) not in keep:
                path.unlink(missing_ok=True)
                removed += 1
    return removed
