"""Trace and schedule files (JSON Lines).

Trace: table lines, then update lines in non-decreasing release order::

    {"type":"table","name":"t1","alpha":0.02,"overhead":0.0,"weight":1.0,"period":10.0}
    {"type":"update","table":"t1","release":12.5}

A join view's line names its inputs, ``"view_of": ["orders", "customers"]`` (tables declared
before it, not views); it has no update lines: the simulator releases one update of the view
each time a load of an input finishes (``schedulers.simulator``).

A latest table's line carries ``"keyed": {"policy": "in-place", "max_keys_per_batch": 100,
"per_key": 0.0001}`` and each of its updates the keys of its rows, ``"keys": [17, 4, 17]``
(integers or strings; ``schedulers.model.KeyedSpec``); a MERGE's rewrite of the files its
keys fall in, ``"rewrite": {"stored_keys": 10000000, "file_keys": 1048576, "per_row": 1e-7}``
(``schedulers.keys.cost.Rewrite``).

Schedule: one line per batch, the fields of ``schedulers.model.BatchRecord``.

Table lines are validated with pydantic. Update lines are checked by hand because a
trace may hold millions of them and this path reads them several times faster; the
checks are the same either way, and every error names the file and line.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from schedulers.model import BatchRecord, TableSpec, Trace


class TraceError(ValueError):
    """A malformed trace; the message names the line and what to fix."""


def _describe(error: ValidationError) -> str:
    errors = error.errors()
    # A misspelt field shows up twice (extra + the real one missing); name the typo.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    where = ".".join(str(part) for part in first["loc"]) or "line"
    if first["type"] == "extra_forbidden":
        known = ", ".join(TableSpec.model_fields)
        return f"field {where!r}: unknown field (table lines take {known})"
    return f"field {where!r}: {first['msg']}"


def parse_trace(lines: Iterable[str], source: str = "trace") -> Trace:
    tables: list[TableSpec] = []
    index: dict[str, int] = {}
    last_by_table: list[float] = []
    update_tables: list[int] = []
    update_releases: list[float] = []
    update_keys: list[tuple[int | str, ...]] = []
    last_release = 0.0
    keyed_trace = False
    loads = json.loads
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source} line {number}"
        try:
            record = loads(line)
        except ValueError as exc:
            raise TraceError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(record, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(record).__name__}")
        kind = record.get("type")
        if kind == "update":
            keys = record.get("keys")
            if len(record) != 3 + ("keys" in record) or "table" not in record or "release" not in record:
                extra = sorted(set(record) - {"type", "table", "release", "keys"})
                missing = sorted({"table", "release"} - set(record))
                problem = f"missing {missing}" if missing else f"unknown fields {extra}"
                raise TraceError(
                    f"{where}: update lines take 'table', 'release' and, for a latest table, 'keys' ({problem})"
                )
            name = record["table"]
            release = record["release"]
            tid = index.get(name) if isinstance(name, str) else None
            if tid is None:
                raise TraceError(f"{where}: update for unknown table {name!r}; declare it in a table line first")
            if tables[tid].view_of is not None:
                raise TraceError(
                    f"{where}: {name!r} is a view: its updates are its inputs' loads, drop its update lines"
                )
            if ("keys" in record) != (tables[tid].keyed is not None):
                raise TraceError(
                    f"{where}: table {name!r} is "
                    + (
                        "a latest table: its updates need 'keys'"
                        if "keys" not in record
                        else "an append table: drop 'keys'"
                    )
                )
            if "keys" in record and not (
                isinstance(keys, list) and all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in keys)
            ):
                raise TraceError(f"{where}: 'keys' must be a list of integers or strings, one per row")
            try:
                if isinstance(release, bool) or not isinstance(release, (int, float)):
                    raise ValueError
                release = float(release)  # a 400-digit int raises OverflowError here
                if not math.isfinite(release):
                    raise ValueError
            except (ValueError, OverflowError):
                shown = repr(record["release"])
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise TraceError(f"{where}: release must be a finite number of seconds, got {shown}") from None
            if release <= last_by_table[tid]:
                raise TraceError(
                    f"{where}: release {release} of table {name!r} is not after its previous release "
                    f"{last_by_table[tid]} (releases of a table must strictly increase, starting above 0)"
                )
            if release < last_release:
                raise TraceError(
                    f"{where}: release {release} is earlier than the line before ({last_release}); "
                    "update lines must be in non-decreasing release order"
                )
            last_by_table[tid] = release
            last_release = release
            update_tables.append(tid)
            update_releases.append(release)
            if keyed_trace:
                update_keys.append(tuple(keys) if keys is not None else ())
        elif kind == "table":
            if update_releases:
                raise TraceError(f"{where}: table lines must come before the first update line")
            fields = {key: value for key, value in record.items() if key != "type"}
            try:
                spec = TableSpec.model_validate(fields)
            except ValidationError as exc:
                raise TraceError(f"{where}: bad table line, {_describe(exc)}") from None
            if spec.name in index:
                raise TraceError(f"{where}: table {spec.name!r} is declared twice")
            for name in spec.view_of or ():
                if name not in index or tables[index[name]].view_of is not None:
                    raise TraceError(
                        f"{where}: view {spec.name!r} reads {name!r}, which is not a table declared before it "
                        "(a view's inputs are tables, declared first)"
                    )
            keyed_trace = keyed_trace or spec.keyed is not None
            index[spec.name] = len(tables)
            tables.append(spec)
            last_by_table.append(0.0)
        else:
            raise TraceError(f'{where}: \'type\' must be "table" or "update", got {kind!r}')
    if not tables:
        raise TraceError(f"{source}: no table lines; a trace declares its tables first")
    return Trace(tables=tables, update_tables=update_tables, update_releases=update_releases, update_keys=update_keys)


def _decoded_lines(handle: IO[bytes], source: str) -> Iterator[str]:
    """Decode line by line so an encoding error can name its line and file offset."""
    offset = 0
    for number, raw in enumerate(handle, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(
                f"{source} line {number}: not UTF-8 text ({exc.reason} at byte {offset + exc.start} of the file); "
                "re-encode the trace as UTF-8"
            ) from None
        offset += len(raw)


def read_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        fast = _read_columns(path)
        if fast is not None:
            return fast
        with path.open("rb") as handle:
            return parse_trace(_decoded_lines(handle, str(path)), source=str(path))
    except FileNotFoundError:
        raise TraceError(f"trace file {path} does not exist") from None
    except IsADirectoryError:
        raise TraceError(f"trace path {path} is a directory; pass a .jsonl trace file") from None
    except OSError as exc:
        raise TraceError(f"cannot read trace file {path}: {exc.strerror or exc}") from None


def _read_columns(path: Path) -> Trace | None:
    """The trace read with pyarrow's JSON reader, its update lines as three columns checked
    at once (issue 36: one ``json.loads`` and its checks per line cost 3.2 s of a million-update
    trace); None when it cannot tell the trace is valid, so that ``parse_trace`` reads it line
    by line and words whatever is wrong. Latest tables' keys are read line by line."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.json as pa_json

    data = path.read_bytes()
    start = data.find(b'{"type": "update"')
    if start <= 0 or data[start - 1 : start] != b"\n" or not data.isascii():
        return None
    head = parse_trace(data[:start].decode("ascii").splitlines(), source=str(path))
    if any(spec.keyed is not None for spec in head.tables):
        return None
    body = data[start:]
    lines = body.count(b"\n") + (not body.endswith(b"\n"))
    if b"\r" in body or b"NaN" in body or b"Infinity" in body or body.count(b'\n{"type": "update"') + 1 != lines:
        return None  # (a blank line, a line of another form, a literal JSON has not: line by line)
    schema = pa.schema([("type", pa.string()), ("table", pa.string()), ("release", pa.float64())])
    try:
        read = pa_json.read_json(
            pa.BufferReader(body),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if read.num_rows != lines or any(column.null_count for column in read.columns):
        return None
    # (By dictionary, not ``pc.index_in``: its value set by ``pa.array`` imports pandas, 0.25 s.)
    encoded = read.column("table").combine_chunks().dictionary_encode()
    known = {spec.name: k for k, spec in enumerate(head.tables)}
    ids = np.array([known.get(name, -1) for name in encoded.dictionary.to_pylist()], dtype=np.int64)
    table_ids = ids[_numbers(encoded.indices, np.int32)]
    if (table_ids < 0).any() or read.column("type").unique().to_pylist() != ["update"]:
        return None
    releases = _numbers(read.column("release").combine_chunks(), np.float64)
    views = np.array([spec.view_of is not None for spec in head.tables])
    if views[table_ids].any() or not np.isfinite(releases).all() or (releases <= 0).any():
        return None
    if len(releases) > 1 and (np.diff(releases) < 0).any():
        return None  # out of release order
    # In release order, a table's releases strictly increase unless one repeats: a repeat is
    # the same table at the same release, next to each other once sorted by table (stable).
    order = np.argsort(table_ids, kind="stable")
    same = (np.diff(table_ids[order]) == 0) & (np.diff(releases[order]) == 0)
    if same.any():
        return None
    return Trace(tables=head.tables, update_tables=table_ids.tolist(), update_releases=releases.tolist())


def _numbers(values: Any, dtype: Any) -> Any:
    """An Arrow array of numbers without nulls as a NumPy view of its buffer (pyarrow's
    ``to_numpy`` first imports pandas: 0.25 s of a command that never uses it)."""
    import numpy as np

    return np.frombuffer(
        values.buffers()[1], dtype=dtype, count=len(values), offset=values.offset * values.type.bit_width // 8
    )


def trace_lines(trace: Trace) -> Iterator[str]:
    for spec in trace.tables:
        dropped = {name for name in ("keyed", "view_of") if getattr(spec, name) is None}
        yield json.dumps({"type": "table", **spec.model_dump(exclude=dropped)})
    names = [spec.name for spec in trace.tables]
    keyed = [spec.keyed is not None for spec in trace.tables]
    if any(keyed) and len(trace.update_keys) != len(trace.update_releases):
        raise ValueError("a trace with latest tables must give each update its keys (update_keys)")
    for i, (tid, release) in enumerate(zip(trace.update_tables, trace.update_releases)):
        line: dict[str, object] = {"type": "update", "table": names[tid], "release": release}
        if keyed[tid]:
            line["keys"] = list(trace.update_keys[i])
        yield json.dumps(line)


def write_trace(trace: Trace, path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as handle:
        for line in trace_lines(trace):
            handle.write(line + "\n")


#: Batches formatted together by ``write_schedule``: Arrow columns of this many rows at a time.
SCHEDULE_CHUNK = 1 << 14
#: Where Arrow's double-to-string cast spells a float as ``float.__repr__`` (and so json.dumps) does:
#: non-integral magnitudes in [1e-4, 1e8). Outside, Arrow drops the ".0" of 2.0 and moves to exponents
#: at other points (1e-05 is 0.00001, 559019696092.656 is 5.59019696092656e+11).
_SAME_FLOATS = (1e-4, 1e8)
_FLOAT_FIELDS = ("start", "finish", "first_release", "last_release")
#: A line's keys in ``BatchRecord.as_dict``'s order, and the two a multi-table job's batch adds.
_LINE_KEYS = ("table", "processor", "start", "finish", "first_release", "last_release", "n_updates")
_JOB_KEYS = ("job", "job_tables")
#: The types a field may hold for Arrow to write it (an int time is integral: json.dumps writes it).
_FIELD_TYPES: dict[str, set[type]] = {
    "table": {str},
    **{field: {float, int} for field in _FLOAT_FIELDS},
    "processor": {int},
    "n_updates": {int},
    "job_tables": {int},
}


def write_schedule(batches: Iterable[BatchRecord], out: IO[str], chunk: int = SCHEDULE_CHUNK) -> None:
    """One ``json.dumps(batch.as_dict())`` line per batch, formatted in Arrow a chunk at a time.

    A simulated schedule has about a line per update (1,009,480 on the 1,000,000-update trace of
    BENCHMARKS.md), and json.dumps of a dict per line was a third of ``loader simulate
    --schedule-out`` there (issue 36). Arrow casts the numbers and joins the pieces in C++; its
    float cast spells a value as repr does only inside ``_SAME_FLOATS``, so a batch with a time
    outside it, or with a value BatchRecord does not declare (an int time, None), is written by
    json.dumps as before: the text is the same either way, which is what ``read_schedule`` and
    ``loader report --schedule`` rely on.
    """
    batches = iter(batches)
    quoted: dict[str, str] = {}
    while rows := list(itertools.islice(batches, chunk)):
        text = _arrow_lines(rows, quoted)
        out.write(text if text is not None else "".join(json.dumps(b.as_dict()) + "\n" for b in rows))


def _arrow_lines(rows: list[BatchRecord], quoted: dict[str, str]) -> str | None:
    """The lines of ``rows``, or None when a field holds a type BatchRecord does not declare.

    Columns reach Arrow as NumPy buffers and literals as elements of an Arrow array: pa.array and
    pa.scalar import pandas on first use: 0.5 s, a third of writing the 1,000,000-line schedule."""
    # Imported here: the scheduling core stays pure Python for everything but writing schedules.
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def arrow(values: np.ndarray, kind: pa.DataType, length: int | None = None) -> pa.Array:
        return pa.Array.from_buffers(kind, len(values) if length is None else length, [None, pa.py_buffer(values)])

    def strings(texts: list[str]) -> pa.Array:  # ASCII, as json.dumps writes
        offsets = np.zeros(len(texts) + 1, np.int32)
        np.cumsum(list(map(len, texts)), out=offsets[1:])
        data = pa.py_buffer("".join(texts).encode("ascii"))
        return pa.Array.from_buffers(pa.string(), len(texts), [None, pa.py_buffer(offsets), data])

    def text(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pc.cast(arrow(values, kind), pa.string())

    columns = {field: list(map(attrgetter(field), rows)) for field in _FIELD_TYPES}
    if any(not set(map(type, columns[field])) <= kinds for field, kinds in _FIELD_TYPES.items()):
        return None
    try:
        numbers = {field: np.array(columns[field], np.float64) for field in _FLOAT_FIELDS}
        numbers |= {field: np.array(columns[field], np.int64) for field in ("processor", "n_updates", "job_tables")}
    except OverflowError:  # an int beyond int64 (or beyond a double, in a time)
        return None
    names = columns["table"]
    distinct = list(set(names))
    for name in set(distinct).difference(quoted):
        quoted[name] = json.dumps(name)
    position = {name: i for i, name in enumerate(distinct)}
    codes = np.array(list(map(position.__getitem__, names)), np.int32)
    values = {"table": pc.take(strings([quoted[name] for name in distinct]), arrow(codes, pa.int32()))}
    values |= {field: text(numbers[field], pa.float64()) for field in _FLOAT_FIELDS}
    values |= {field: text(numbers[field], pa.int64()) for field in ("processor", "n_updates")}
    keys = [("{" if i == 0 else ", ") + json.dumps(key) + ": " for i, key in enumerate(_LINE_KEYS + _JOB_KEYS)]
    literal = strings([*keys, "}\n", ""])  # its elements are the scalars below (no pa.scalar)
    pieces = [piece for i, key in enumerate(_LINE_KEYS) for piece in (literal[i], values[key])]
    low, high = _SAME_FLOATS
    same = np.ones(len(rows), bool)
    for field in _FLOAT_FIELDS:
        column = numbers[field]
        size = np.abs(column)
        same &= (size >= low) & (size < high) & (column != np.floor(column))
    grouped = numbers["job_tables"] > 1
    if grouped.any():
        jobs = list(map(attrgetter("job"), rows))  # read only here: a single-table batch's line has no job
        if not set(map(type, jobs)) <= {int, type(None)}:
            return None
        same &= ~(grouped & np.array([job is None for job in jobs]))  # json.dumps writes "job": null
        try:
            job = text(np.array([0 if job is None else job for job in jobs], np.int64), pa.int64())
        except OverflowError:
            return None
        job_keys = literal[len(_LINE_KEYS)], literal[len(_LINE_KEYS) + 1]
        tables = text(numbers["job_tables"], pa.int64())
        tail = pc.binary_join_element_wise(job_keys[0], job, job_keys[1], tables, literal[-1])
        in_group = arrow(np.packbits(grouped, bitorder="little"), pa.bool_(), len(rows))
        pieces.append(pc.if_else(in_group, tail, literal[-1]))
    lines = pc.binary_join_element_wise(*pieces, literal[-2], literal[-1])
    if not same.all():
        patched = lines.to_pylist()
        for i in np.flatnonzero(~same).tolist():
            patched[i] = json.dumps(rows[i].as_dict()) + "\n"
        return "".join(patched)
    _, offsets, data = lines.buffers()
    bounds = memoryview(offsets).cast("i")
    return str(memoryview(data)[bounds[lines.offset] : bounds[lines.offset + len(lines)]], "utf-8")


def read_schedule(path: str | Path) -> list[BatchRecord]:
    with Path(path).open(encoding="utf-8") as handle:
        return [BatchRecord(**json.loads(line)) for line in handle if line.strip()]
