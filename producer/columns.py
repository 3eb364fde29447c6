"""Sends of columns (a pyarrow Table or RecordBatch, a pandas DataFrame): made the table's
Arrow types, then an Arrow IPC stream, or JSON rows (``body_format = "json"``).

Why the producer converts: the service takes an Arrow stream only when its types are the
table's (loader/intake/columnar_bodies.py: a stream is taken without converting a value),
while a DataFrame's integers are int64, its times nanoseconds, its strings large. The
table's types come from ``GET /v1/tables/{table}`` (its ``schema``, in the service's JSON
form, mapped here: the producer imports nothing of the service), and every column is cast
with pyarrow's safe cast, which refuses what would change a value (an int64 past int32,
nanoseconds that are not whole microseconds): that send fails with ValueError, nothing
buffered. Columns the table lacks go as they are: the service refuses them, or drops them
for a table that ignores new fields.

pyarrow is optional: without it a producer sends JSON rows only.
"""

from __future__ import annotations

import base64
import importlib.util
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

def arrow_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def columns_of(value: Any) -> pa.Table | None:
    """``value`` as a pyarrow Table when it is one, a RecordBatch or a pandas DataFrame; None
    for rows (an iterable of dicts). A DataFrame's index is not a column (``preserve_index=False``)."""
    module = type(value).__module__
    if module.startswith("pandas"):
        if type(value).__name__ != "DataFrame":
            raise TypeError(f"send takes rows, a pyarrow Table or RecordBatch, or a pandas DataFrame, not a {module}")
        if not arrow_available():
            raise TypeError("sending a DataFrame needs pyarrow (pip install pyarrow), or send df.to_dict('records')")
        import pyarrow as pa

        return pa.Table.from_pandas(value, preserve_index=False)
    if not module.startswith("pyarrow"):
        return None
    import pyarrow as pa

    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    raise TypeError(f"send takes a pyarrow Table or RecordBatch, not a {type(value).__name__}")


_PRIMITIVES = {
    "string": "string",
    "binary": "binary",
    "int8": "int8",
    "byte": "int8",
    "int16": "int16",
    "short": "int16",
    "int32": "int32",
    "integer": "int32",
    "int64": "int64",
    "long": "int64",
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "boolean": "bool_",
    "date": "date32",
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def arrow_type(declared: Any) -> pa.DataType:
    """A column type as the service shows it (``GET /v1/tables/{table}``: its short names or
    Delta's, a struct, array or map in Delta's schema JSON) as its Arrow type."""
    import pyarrow as pa

    if isinstance(declared, str):
        name = declared.strip().lower()
        if name in _PRIMITIVES:
            return getattr(pa, _PRIMITIVES[name])()
        if name == "timestamp":
            return pa.timestamp("us", tz="UTC")
        if name == "timestamp_ntz":
            return pa.timestamp("us")
        found = _DECIMAL.match(name)
        if found:
            return pa.decimal128(int(found.group(1)), int(found.group(2)))
    elif isinstance(declared, dict):
        kind = declared.get("type")
        if kind == "struct":
            fields = declared["fields"]
            return pa.struct([pa.field(f["name"], arrow_type(f["type"]), f.get("nullable", True)) for f in fields])
        if kind == "array":
            element = pa.field("element", arrow_type(declared["elementType"]), declared.get("containsNull", True))
            return pa.list_(element)
        if kind == "map":
            return pa.map_(
                pa.field("key", arrow_type(declared["keyType"]), nullable=False),
                pa.field("value", arrow_type(declared["valueType"]), nullable=declared.get("valueContainsNull", True)),
            )
    raise ValueError(f"the service showed a column type the producer does not know: {declared!r}; upgrade it")


def arrow_schema(shown: dict[str, Any]) -> pa.Schema:
    """The table's Arrow schema from its ``schema`` in ``GET /v1/tables/{table}``."""
    import pyarrow as pa

    return pa.schema([pa.field(c["name"], arrow_type(c["type"]), c.get("nullable", True)) for c in shown["columns"]])


def as_table_types(data: pa.Table, schema: pa.Schema, table: str) -> pa.Table:
    """``data``'s columns cast to the table's types (safe: nothing rounded or cut); ValueError
    naming the column and both types when a cast would change a value or is not defined."""
    import pyarrow as pa

    columns, fields = [], []
    for name in data.column_names:
        values = data.column(name)
        if name in schema.names:
            target = schema.field(name).type
            if values.type != target:
                try:
                    values = values.cast(target, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    reason = str(exc).splitlines()[0][:200]
                    raise ValueError(
                        f"column {name!r} is {values.type} but {target} in table {table!r}, and it does not convert "
                        f"exactly ({reason}); convert it first: nothing was buffered"
                    ) from None
        columns.append(values)
        fields.append(pa.field(name, values.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def ipc_bodies(data: pa.Table, max_rows: int, max_bytes: int) -> list[tuple[bytes, int, int]]:
    """``data`` as Arrow IPC streams of at most ``max_rows`` rows and about ``max_bytes`` bytes
    each (one row at least): (stream, first row, rows)."""
    import pyarrow as pa

    per_row = max(1, data.nbytes // max(1, data.num_rows))
    step = max(1, min(max_rows, max_bytes // per_row))
    out = []
    for first in range(0, data.num_rows, step):
        part = data.slice(first, step)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part)
        out.append((sink.getvalue().to_pybytes(), first, part.num_rows))
    return out


def _plain(value: Any, kind: pa.DataType) -> Any:
    """A value of ``kind`` as a JSON row carries it: bytes as base64, a map as an object (string
    keys) or ``{"key", "value"}`` entries, inside structs and lists too."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_map(kind):
        entries = [(_plain(k, kind.key_type), _plain(v, kind.item_type)) for k, v in value]
        if pa.types.is_string(kind.key_type) or pa.types.is_large_string(kind.key_type):
            return dict(entries)
        return [{"key": k, "value": v} for k, v in entries]
    if pa.types.is_struct(kind):
        return {f.name: _plain(value.get(f.name), f.type) for f in kind}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_plain(v, kind.value_type) for v in value]
    return value


def json_rows(data: pa.Table) -> list[dict[str, Any]]:
    """``data``'s rows as JSON rows of the service (``body_format = "json"``)."""
    types = {name: data.schema.field(name).type for name in data.column_names}
    return [{name: _plain(value, types[name]) for name, value in row.items()} for row in data.to_pylist()]
