"""Updates that name files in the landing directory instead of carrying rows.

Before the update is acknowledged each file is opened inside the landing directory
without following symbolic links (each path component is opened relative to its parent
with O_NOFOLLOW, so a link swapped in between a check and the open cannot redirect it),
copied from that open descriptor into storage the service owns (an in-kernel copy) and
fsynced, and then the *copy* is checked: readable as its format, every column of a type
the table's column takes and every value in its type's domain (loader/intake/file_types.py),
in bounded chunks. A Parquet copy whose types Spark reads as the table's is loaded as it
is; any other accepted copy (a Parquet file of convertible types, every CSV and JSON
file) is written again, as Parquet with the table's exact Arrow schema, from the values
intake checked. What was checked is therefore exactly what gets loaded; a file whose size
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
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from loader.core.durable_files import ENVIRONMENTAL_ERRNOS, fsync_directory
from loader.core.errors import BadRequest, Conflict, Invalid, ServiceError, TooLarge, Unavailable
from loader.core.schema import TableSchema
from loader.core.updates import FileFormat, FileRef
from loader.intake.file_types import Unloadable, conform, is_nested, loads_as_is, text_schema
from loader.intake.requests import loads_json
from loader.intake.rows import check_partition_values, quote, rows_to_arrow

#: Largest landing file taken by default (``max_landing_file_bytes`` in the configuration).
DEFAULT_MAX_FILE_BYTES = 16 << 30

#: Rows per chunk when a landing file is checked (bounded memory whatever the file's size).
CHUNK_ROWS = 65_536
#: Bytes of JSON text parsed into Python rows at a time (``json_rows_chunks``).
CHUNK_BYTES = 16 << 20

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


def iter_landing_file(path: Path, fmt: FileFormat, schema: pa.Schema) -> Iterator[pa.Table]:
    """A landing file in bounded chunks, as the table's columns (loader/intake/file_types.py:
    by name, missing ones null, converted exactly or refused with Unloadable).

    Streaming keeps a multi-gigabyte feed file from being held in the service's memory
    while intake checks it. Load paths that read a copy with pyarrow (a group job's
    executors) read it here too, by the rules intake checked it with.
    """
    first_row = 0
    for chunk, text in _raw_chunks(path, fmt, schema):
        yield conform(chunk, schema, text, first_row)
        first_row += chunk.num_rows


def _raw_chunks(path: Path, fmt: FileFormat, schema: pa.Schema) -> Iterator[tuple[pa.RecordBatch, bool]]:
    """The file's chunks as its format reads them, and whether they were parsed from text."""
    if fmt is FileFormat.parquet:
        # INT96 (Spark's and Impala's legacy timestamps) as microseconds: as nanoseconds
        # pyarrow would wrap dates outside 1677..2262 silently.
        for batch in pq.ParquetFile(path, coerce_int96_timestamp_unit="us").iter_batches(batch_size=CHUNK_ROWS):
            yield batch, False
        return
    if fmt is FileFormat.csv:
        options = pa_csv.ConvertOptions(
            column_types=text_schema(schema, json=False), include_columns=schema.names, include_missing_columns=True
        )
        reader = pa_csv.open_csv(path, convert_options=options)
    else:
        parse = pa_json.ParseOptions(explicit_schema=text_schema(schema, json=True), unexpected_field_behavior="error")
        reader = pa_json.open_json(path, parse_options=parse)
    for batch in reader:
        yield batch, True


def json_rows_chunks(path: Path, schema: TableSchema, table: str, shown: str) -> Iterator[pa.Table]:
    """A JSON-lines file of a table with nested columns, a chunk at a time, each line checked
    and converted as an NDJSON body's row is (loader/intake/rows.py: the same rules, the
    same paths in its errors, ``items[3].sku``). pyarrow's JSON reader cannot: it reads no
    map from a JSON object, and converts nothing inside a struct or a list (a decimal, a
    date, base64). Text files are converted to Parquet at intake, so loads never read one."""
    exact = schema.exact_numbers
    rows: list[Any] = []
    first_row = size = 0
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(loads_json(line, f"line {number}", exact))
                except BadRequest as exc:  # the file's content, as a JSON file pyarrow cannot parse is
                    raise Invalid(exc.message, table=table, row=first_row + len(rows)) from None
                size += len(line)
                if len(rows) >= CHUNK_ROWS or size >= CHUNK_BYTES:
                    yield rows_to_arrow(rows, schema, table, first_row)
                    first_row += len(rows)
                    rows, size = [], 0
        if rows:
            yield rows_to_arrow(rows, schema, table, first_row)
    except Invalid as exc:  # named by the row; the request may name several files
        raise Invalid(f"file {shown}: {exc.message}", **exc.details) from None


def read_landing_file(path: Path, fmt: FileFormat, schema: pa.Schema) -> pa.Table:
    """The whole file as one table (small files: tests and the Spark-free sink)."""
    return pa.concat_tables([schema.empty_table(), *iter_landing_file(path, fmt, schema)])


def _check_nulls(table: pa.Table, schema: TableSchema, name: str, first_row: int) -> None:
    for column in schema.columns:
        values = table.column(column.name)
        if not column.nullable and values.null_count:
            row = first_row + pc.index(pc.is_null(values), True).as_py()
            raise Invalid(
                f"row {row} of file {name}: column {column.name!r} with null values is required (not nullable); "
                "nothing of the update was accepted: fix the file and send the whole update again",
                row=row,
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
            loaded = _check_copy(target, fmt, schema, arrow, raw, table, owned)
            if loaded != target:  # written again with the table's types: the raw copy is not needed
                copies.append(loaded)
                target.unlink(missing_ok=True)
                fmt, size = FileFormat.parquet, loaded.stat().st_size
            refs.append(FileRef(path=str(loaded), format=fmt, size=size))
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


def _check_copy(
    path: Path, fmt: FileFormat, schema: TableSchema, arrow: pa.Schema, raw: str, table: str, owned: Path
) -> Path:
    """The service's own copy checked as the load will read it; the file to load: the copy
    itself when Spark reads its types as the table's, else a fsynced Parquet file in
    ``owned`` holding what was checked, with the table's exact Arrow schema (the caller
    removes the copy). Invalid naming the file (and the row and column) otherwise; a
    failure to write the converted file is the service's (Unavailable)."""
    converted = owned / f"{uuid.uuid4().hex}.parquet"
    out = _Converted(converted, arrow, owned)
    try:
        rewrite = fmt is not FileFormat.parquet
        if not rewrite:
            file_schema = pq.ParquetFile(path, coerce_int96_timestamp_unit="us").schema_arrow
            rewrite = not loads_as_is(file_schema, arrow)
        first_row = 0
        by_rows = fmt is FileFormat.json and any(is_nested(field.type) for field in arrow)
        chunks = json_rows_chunks(path, schema, table, quote(raw)) if by_rows else iter_landing_file(path, fmt, arrow)
        for chunk in chunks:
            _check_nulls(chunk, schema, quote(raw), first_row)
            check_partition_values(chunk, schema, f"file {quote(raw)}", first_row)
            if rewrite:
                out.write(chunk)
            first_row += chunk.num_rows
        if not rewrite:
            return path
        out.finish()
        return converted
    except Invalid as exc:
        exc.details.update(table=table, file=raw[:200])
        raise
    except Unloadable as exc:
        details = {"row": exc.row} if exc.row is not None else {}
        raise Invalid(
            f"file {quote(raw)} cannot be loaded into table {table!r} as {fmt.value}: {exc}; nothing of the update "
            "was accepted: fix the file and send the whole update again",
            table=table,
            file=raw[:200],
            column=exc.column,
            **details,
        ) from None
    except (pa.ArrowException, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise Invalid(
            f"file {quote(raw)} cannot be loaded into table {table!r} as {fmt.value} with the table's columns "
            f"{arrow.names}: {reason}; fix the file and send the update again",
            table=table,
            file=raw[:200],
        ) from None
    finally:
        out.abandon()


class _Converted:
    """The converted copy of a landing file, written as its chunks are checked. Its writes
    hold values already checked, so a failure is the service's disk (Unavailable)."""

    def __init__(self, path: Path, arrow: pa.Schema, owned: Path) -> None:
        self.path, self.arrow, self.owned = path, arrow, owned
        self.writer: pq.ParquetWriter | None = None
        self.done = False

    def write(self, chunk: pa.Table) -> None:
        try:
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.path, self.arrow)
            self.writer.write_table(chunk)
        except (OSError, pa.ArrowException) as exc:
            raise self._refusal(exc) from None

    def finish(self) -> None:
        """Closed and fsynced (an empty file still names the columns)."""
        try:
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.path, self.arrow)
            self.writer.close()
            self.writer = None
            with open(self.path, "rb") as handle:
                os.fsync(handle.fileno())
        except (OSError, pa.ArrowException) as exc:
            raise self._refusal(exc) from None
        self.done = True

    def abandon(self) -> None:
        """Unless finished: closed and removed."""
        if self.done:
            return
        if self.writer is not None:
            try:
                self.writer.close()
            except (OSError, pa.ArrowException):
                pass
            self.writer = None
        self.path.unlink(missing_ok=True)

    def _refusal(self, exc: BaseException) -> Unavailable:
        error = exc if isinstance(exc, OSError) and exc.errno else OSError(errno.EIO, str(exc))
        return _storage_refusal(error, self.owned)


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
