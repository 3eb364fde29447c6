"""Column types for the fields a feed sends before its table has them (``on_new_fields = "add"``).

Snowpipe Streaming and the Iceberg sink for Kafka Connect evolve a table from the rows
they receive; so does a table declared with ``on_new_fields = "add"`` (docs/tables.md,
"Changing a table's schema"). What a JSON value says about its type is little, so the
rules are few and never guess beyond it: an integer is an ``int64``, any other number a
``float64`` (a field seen as both is a ``float64``), a string a ``string``, true or false a
``boolean``, an object a ``struct`` of its fields, a list an ``array`` of its elements'
type. A field seen only as null (or an empty list) says nothing: it waits for a row that
says more. Values that disagree (a string here, a number there, in one request or in one
list) are the producer's to settle, and are refused naming the field: a guess would fix
the table's type for good (a table never changes a column's type by itself).

Every added column is nullable: rows acknowledged before it read back with it null.
The result is Delta's schema JSON (``parse_type`` reads it), so what is inferred is what
an operator would have declared.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from loader.core.errors import Invalid
from loader.core.schema import Column, TableSchema, parse_type
from loader.intake.rows import RESEND, quote

#: How deep an inferred field's value may nest (objects in lists in objects...).
MAX_INFERRED_DEPTH = 32
#: The inferred type of a JSON integer beyond int64's range: none (a decimal would be a guess).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The Delta name of the primitive each JSON scalar infers.
_SCALARS: dict[type, str] = {bool: "boolean", int: "long", float: "double", str: "string"}


class _Mixed(ValueError):
    """Two values of one field disagree; the message says how (the caller names the field)."""


def _what(declared: Any) -> str:
    """A type for a message: ``a string``, ``an object``, ``a list``."""
    if isinstance(declared, dict):
        return {"struct": "an object", "array": "a list"}.get(declared.get("type", ""), "a value")
    return {"long": "an integer", "double": "a number", "string": "a string", "boolean": "true or false"}[declared]


def infer_value(value: Any, path: str, depth: int, max_depth: int) -> Any:
    """The Delta type of one JSON value (None: it says nothing, a null or an empty list)."""
    if value is None:
        return None
    kind = _SCALARS.get(type(value))
    if kind is not None:
        if kind == "long" and not INT64_MIN <= value <= INT64_MAX:
            raise _Mixed(f"{path}: the integer {quote(value)} does not fit an int64; declare the column (decimal)")
        return kind
    if depth >= max_depth:
        raise _Mixed(f"{path}: nested deeper than {max_depth} levels")
    if isinstance(value, dict):
        fields: dict[str, Any] = {}
        for name, item in value.items():
            inferred = infer_value(item, f"{path}.{name}", depth + 1, max_depth)
            if inferred is not None:
                fields[name] = inferred
        if not fields:
            return None
        return _struct(fields)
    if isinstance(value, list):
        element: Any = None
        for k, item in enumerate(value):
            inferred = infer_value(item, f"{path}[{k}]", depth + 1, max_depth)
            try:
                element = merge(element, inferred)
            except _Mixed as exc:
                raise _Mixed(f"{path}[{k}]: a list of mixed types ({exc}); send one type per list") from None
        if element is None:
            return None
        return {"type": "array", "elementType": element, "containsNull": True}
    raise _Mixed(f"{path}: {quote(value)} is not a JSON value")


def _struct(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields.items()],
    }


def merge(a: Any, b: Any) -> Any:
    """One type for two values of a field; _Mixed when they disagree."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    if isinstance(a, str) and isinstance(b, str) and {a, b} == {"long", "double"}:
        return "double"  # 3 and 2.5: numbers both
    if isinstance(a, dict) and isinstance(b, dict) and a["type"] == b["type"] == "struct":
        fields = {f["name"]: f["type"] for f in a["fields"]}
        for f in b["fields"]:
            try:
                fields[f["name"]] = merge(fields.get(f["name"]), f["type"])
            except _Mixed as exc:
                raise _Mixed(f".{f['name']}: {exc}") from None
        return _struct(fields)
    if isinstance(a, dict) and isinstance(b, dict) and a["type"] == b["type"] == "array":
        return {"type": "array", "elementType": merge(a["elementType"], b["elementType"]), "containsNull": True}
    raise _Mixed(f"{_what(a)} and {_what(b)}")


def extended(original: Any, current: Any, value: Any, path: str, depth: int, max_depth: int) -> Any:
    """``current`` (Delta JSON: ``original`` and what earlier rows added to it) with the struct
    fields ``value`` brings that it lacks, at any depth (inside lists and map values too).
    A value of another shape than its type is left to validation, which names it."""
    if value is None or not isinstance(current, dict):
        return current
    kind = current["type"]
    if kind == "struct" and isinstance(value, dict):
        before = {f["name"]: f["type"] for f in original["fields"]} if isinstance(original, dict) else {}
        fields = [dict(f) for f in current["fields"]]
        by_name = {f["name"]: f for f in fields}
        for name, item in value.items():
            where = f"{path}.{name}"
            field = by_name.get(name)
            if field is None:  # new here
                inferred = infer_value(item, where, depth + 1, max_depth)
                if inferred is not None:
                    field = {"name": name, "type": inferred, "nullable": True, "metadata": {}}
                    fields.append(field)
                    by_name[name] = field
            elif name in before:  # declared: new fields may sit deeper
                field["type"] = extended(before[name], field["type"], item, where, depth + 1, max_depth)
            else:  # added by an earlier row: both must agree
                try:
                    field["type"] = merge(field["type"], infer_value(item, where, depth + 1, max_depth))
                except _Mixed as exc:
                    raise _Mixed(f"{where}: {exc}") from None
        return {**current, "fields": fields}
    if kind == "array" and isinstance(value, list):
        element, was = current["elementType"], original.get("elementType") if isinstance(original, dict) else None
        for k, item in enumerate(value):
            element = extended(was, element, item, f"{path}[{k}]", depth + 1, max_depth)
        return {**current, "elementType": element}
    if kind == "map" and isinstance(value, (dict, list)):
        held, was = current["valueType"], original.get("valueType") if isinstance(original, dict) else None
        for key, item in _entries(value):
            held = extended(was, held, item, f"{path}[{quote(key)}]", depth + 1, max_depth)
        return {**current, "valueType": held}
    return current


def _entries(value: dict[str, Any] | list[Any]) -> list[tuple[Any, Any]]:
    """A map's (key, value) pairs, from its JSON object or its array of {"key", "value"} entries."""
    if isinstance(value, dict):
        return list(value.items())
    return [(e.get("key"), e.get("value")) for e in value if isinstance(e, dict)]


def union_type(current: Any, wanted: Any) -> Any:
    """``current`` (Delta JSON) with the struct fields ``wanted`` has and it lacks, at any
    depth; a field both have keeps ``current``'s type (the first to add it wins)."""
    if not (isinstance(current, dict) and isinstance(wanted, dict) and current["type"] == wanted["type"]):
        return current
    if current["type"] == "struct":
        theirs = {f["name"]: f for f in wanted["fields"]}
        ours = {f["name"] for f in current["fields"]}
        fields = [
            {**f, "type": union_type(f["type"], theirs[f["name"]]["type"])} if f["name"] in theirs else f
            for f in current["fields"]
        ]
        fields += [f for f in wanted["fields"] if f["name"] not in ours]
        return {**current, "fields": fields}
    if current["type"] == "array":
        return {**current, "elementType": union_type(current["elementType"], wanted["elementType"])}
    if current["type"] == "map":
        return {**current, "valueType": union_type(current["valueType"], wanted["valueType"])}
    return current


def grown_columns(columns: Sequence[Column], wanted: Sequence[Column]) -> list[Column]:
    """``columns`` grown by ``wanted``: a column of a new name appended; a nested column of a
    name they have, widened by the struct fields it lacks (``union_type``: a field either has
    keeps the type ``columns`` give it); every other column as it is. Names match exactly: a
    name in other letters is appended, and the schema refuses it as a duplicate."""
    out = list(columns)
    at = {c.name: k for k, c in enumerate(out)}
    for column in wanted:
        k = at.get(column.name)
        if k is None:
            at[column.name] = len(out)
            out.append(column)
        elif isinstance(out[k].type.delta, dict):
            wider = union_type(out[k].type.delta, column.type.delta)
            if wider != out[k].type.delta:
                out[k] = Column(name=out[k].name, type=parse_type(wider), nullable=out[k].nullable)
    return out


def known_fields(row: Any, names: frozenset[str], nested: list[Column]) -> Any:
    """``row`` without the fields its table lacks, at any depth (a row that is no object is
    left to validation, which names it)."""
    if not isinstance(row, dict):
        return row
    kept = {k: v for k, v in row.items() if k in names}
    for column in nested:
        if kept.get(column.name) is not None:
            kept[column.name] = strip_unknown(column.type.delta, kept[column.name])
    return kept


def strip_unknown(declared: Any, value: Any) -> Any:
    """``value`` without the struct fields its type (Delta JSON) lacks, at any depth (``ignore``)."""
    if value is None or not isinstance(declared, dict):
        return value
    kind = declared["type"]
    if kind == "struct" and isinstance(value, dict):
        types = {f["name"]: f["type"] for f in declared["fields"]}
        return {k: strip_unknown(types[k], v) for k, v in value.items() if k in types}
    if kind == "array" and isinstance(value, list):
        return [strip_unknown(declared["elementType"], item) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {k: strip_unknown(declared["valueType"], v) for k, v in value.items()}
    if kind == "map" and isinstance(value, list):
        held = declared["valueType"]
        return [
            {**e, "value": strip_unknown(held, e["value"])} if isinstance(e, dict) and "value" in e else e
            for e in value
        ]
    return value


def unknown_fields(rows: Iterable[Any], names: frozenset[str]) -> list[str]:
    """Top-level fields of ``rows`` that are not columns, in the order first seen."""
    seen: dict[str, None] = {}
    for row in rows:
        if isinstance(row, dict) and not names.issuperset(row):
            for key in row:
                if key not in names:
                    seen.setdefault(key, None)
    return list(seen)


def nested_columns(schema: TableSchema) -> list[Column]:
    """The columns whose type has structs, lists or maps (their values may bring new fields)."""
    return [c for c in schema.columns if isinstance(c.type.delta, dict)]


def infer_columns(rows: Sequence[Any], schema: TableSchema, table: str, max_depth: int) -> list[Column]:
    """What ``rows`` add to ``schema``: a nullable column for each new top-level field (fields
    seen only as null wait), and each nested column whose structs gain nullable fields (the
    same column, its type wider); Invalid naming the field whose values disagree."""
    new = unknown_fields(rows, frozenset(schema.names))
    nested = nested_columns(schema)
    if not new and not nested:
        return []
    types: dict[str, Any] = dict.fromkeys(new)
    grown: dict[str, Any] = {c.name: c.type.delta for c in nested}
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            continue  # refused by validation, with its row number
        name = ""
        try:
            for name in new:
                if name in row:
                    types[name] = merge(types[name], infer_value(row[name], name, 1, max_depth))
            for column in nested:
                name = column.name
                if row.get(name) is not None:
                    grown[name] = extended(column.type.delta, grown[name], row[name], name, 1, max_depth)
        except _Mixed as exc:
            detail = str(exc)
            what = detail if detail.startswith(name) else f"{name}: {detail}"
            raise Invalid(
                f"row {index} of table {table!r}: new field {what}; the table adds fields it has not seen "
                f"(on_new_fields = \"add\") only from values of one type; {RESEND}",
                table=table,
                row=index,
                column=name[:60],
            ) from None
    wanted = [(name, declared, True) for name, declared in types.items() if declared is not None]
    wanted += [(c.name, grown[c.name], c.nullable) for c in nested if grown[c.name] != c.type.delta]
    columns = []
    for name, declared, nullable in wanted:
        try:
            columns.append(Column(name=name, type=parse_type(declared), nullable=nullable))
        except ValueError as exc:
            raise Invalid(
                f"table {table!r}: new field {quote(name)} cannot be a column: {exc}; {RESEND}",
                table=table,
                column=name[:60],
            ) from None
    return columns
