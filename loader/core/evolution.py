"""Schema evolution: which changes of a table's schema the loader applies while it runs,
and the message for each it refuses.

One pure judgement, shared by the operator's ``PATCH`` of a schema, the configuration file
and (later) feed-driven additions, so that every way a schema changes obeys the same rules:
the rules Delta's own readers follow for a table whose files were written under older
schemas. A column added is read as null from the files before it, so it must be nullable;
a NOT NULL column may become nullable (older files hold no null), never the reverse; a
type may only widen, and only where the writer in use can record Delta's ``typeWidening``
feature; a column may be renamed or dropped only under Delta column mapping, which
neither writer here uses. Partition columns, a latest table's key and ``order_by``, and a
view's join columns name where rows go and which row is which: they never change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from loader.core.errors import Conflict
from loader.core.schema import Array, Column, DataTypeValue, Map, Struct, TableSchema

#: Type changes Delta's ``typeWidening`` feature allows (the type names of loader/core/schema.py);
#: the relation is transitive (int8 -> int64 through int16 and int32). And a decimal's
#: precision may grow at the same scale (``_widens``).
WIDENINGS: frozenset[tuple[str, str]] = frozenset(
    {("int8", "int16"), ("int16", "int32"), ("int32", "int64"), ("float32", "float64"), ("date", "timestamp_ntz")}
)
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
#: What the operator is told to do instead of a widening. Neither writer widens: the schema
#: change is committed by ``deltalake``, which cannot record ``typeWidening`` (its
#: ``TableAlterer.add_feature`` offers no such feature), and a table that has it is one
#: deltalake 1.6.6 cannot read ("reader features {'typeWidening'} ... not yet supported"):
#: the loader's own reads of the log (the exactly-once txn, the table's rules) and every
#: deltalake reader would fail on it, whichever writer committed the change.
WITHOUT_WIDENING = (
    "the loader cannot widen a column's type: a table with Delta's typeWidening feature is one its "
    "deltalake reader (and the deltalake readers of the warehouse) cannot read; add a new column of the "
    "wider type, or load into a new table"
)


@dataclass(frozen=True)
class SchemaChange:
    """What a schema change does to the table, in the order Delta applies it."""

    old: TableSchema
    new: TableSchema
    #: Columns appended (each nullable).
    added: tuple[Column, ...] = ()
    #: Columns that were NOT NULL and become nullable.
    relaxed: tuple[str, ...] = ()
    #: (column, old type, new type) of each widened column.
    widened: tuple[tuple[str, str, str], ...] = ()
    #: Fields added inside nested columns, by their path (``items[].note``; nullable each).
    fields_added: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.relaxed or self.widened or self.fields_added)


def type_name(column: Column) -> str:
    return str(getattr(column.type, "value", column.type))


def plan_change(
    table: str,
    old: TableSchema,
    new: TableSchema,
    *,
    widening: bool,
    view_columns: Mapping[str, Sequence[str]] | None = None,
) -> SchemaChange:
    """The change from ``old`` to ``new``, or a ``Conflict`` naming every column it cannot
    apply and what to do instead. ``widening``: the writer records ``typeWidening``.
    ``view_columns``: per join view reading the table, the table's columns it joins on."""
    refusals: list[str] = []
    before = {c.name: c for c in old.columns}
    after = {c.name: c for c in new.columns}
    dropped = [name for name in before if name not in after]
    if dropped:
        refusals.append(
            f"columns {dropped} are missing from the new schema: a column cannot be dropped or renamed "
            "(that needs Delta column mapping, which the loader's writers do not use); keep them, and add "
            "new columns after them"
        )
    added = tuple(c for c in new.columns if c.name not in before)
    if not dropped and [c.name for c in new.columns[: len(before)]] != list(before):
        refusals.append(f"the columns {list(before)} keep their order, and new columns go after them")
    required = [c.name for c in added if not c.nullable]
    if required:
        refusals.append(
            f"new columns {required} must be nullable (files written before them read them as null): "
            'declare them "nullable": true'
        )
    relaxed, widened, fields_added = [], [], []
    for name, was in before.items():
        now = after.get(name)
        if now is None:
            continue
        if was.nullable and not now.nullable:
            refusals.append(f"column {name!r} is nullable and cannot become NOT NULL (rows already loaded may be null)")
        elif not was.nullable and now.nullable:
            relaxed.append(name)
        if type_name(was) != type_name(now):
            if not (was.type.primitive and now.type.primitive):
                problems, grown = nested_change(was.type, now.type, name)
                if problems:
                    refusals.append(
                        f"column {name!r} cannot change from {type_name(was)[:200]} to {type_name(now)[:200]}: "
                        + "; ".join(problems[:5])
                        + " (a nested column takes new nullable fields at the end of its structs, nothing else; "
                        "add a new column instead)"
                    )
                fields_added.extend(grown)
            elif not _widens(type_name(was), type_name(now)):
                refusals.append(
                    f"column {name!r} cannot change from {type_name(was)} to {type_name(now)}: only widening "
                    f"changes are allowed ({', '.join(f'{a} -> {b}' for a, b in sorted(WIDENINGS))}, a decimal's "
                    "precision up at the same scale)"
                )
            elif not widening:
                refusals.append(
                    f"column {name!r} cannot widen from {type_name(was)} to {type_name(now)}: {WITHOUT_WIDENING}"
                )
            else:
                widened.append((name, type_name(was), type_name(now)))
    for what, was_value, now_value in (
        ("partition columns", old.partition_by, new.partition_by),
        ("key", old.key, new.key),
        ("order_by", old.order_by, new.order_by),
    ):
        if was_value != now_value:
            refusals.append(f"the {what} cannot change ({was_value!r} -> {now_value!r}): register a new table")
    changed = {name for name, _, _ in widened} | set(relaxed)
    for view, columns in sorted((view_columns or {}).items()):
        touched = sorted(changed & set(columns))
        if touched:
            refusals.append(
                f"join view {view!r} joins on {touched}: their type and nullability cannot change while it reads "
                "the table; retire the view first"
            )
    if refusals:
        raise Conflict(f"table {table!r}: " + "; ".join(refusals), table=table, refusals=refusals)
    return SchemaChange(old, new, added, tuple(relaxed), tuple(widened), tuple(fields_added))


def nested_change(old: DataTypeValue, new: DataTypeValue, path: str) -> tuple[list[str], list[str]]:
    """What cannot change from nested type ``old`` to ``new`` (each named by its path), and the
    paths of the fields added. A struct may take new fields after its own, each nullable (a
    reader reads them as null from the files before them, as Delta's readers do); every other
    part keeps its type and nullability."""
    if isinstance(old, Struct) and isinstance(new, Struct):
        problems, added = [], []
        names = [f.name for f in old.fields]
        if [f.name for f in new.fields[: len(names)]] != names:
            return [f"{path}: the fields {names[:20]} stay, in their order, before any new one"], []
        for was, now in zip(old.fields, new.fields):
            where = f"{path}.{was.name}"
            if was.nullable != now.nullable:
                problems.append(f"{where}: a nested field keeps its nullability")
            found, grown = nested_change(was.type, now.type, where)
            problems += found
            added += grown
        for extra in new.fields[len(names) :]:
            if not extra.nullable:
                problems.append(f"{path}.{extra.name}: a new field must be nullable")
            added.append(f"{path}.{extra.name}")
        return problems, added
    if isinstance(old, Array) and isinstance(new, Array):
        if old.contains_null != new.contains_null:
            return [f"{path}: an array keeps its containsNull"], []
        return nested_change(old.element, new.element, f"{path}[]")
    if isinstance(old, Map) and isinstance(new, Map):
        if old.key != new.key or old.value_contains_null != new.value_contains_null:
            return [f"{path}: a map keeps its key type and its valueContainsNull"], []
        return nested_change(old.value_type, new.value_type, f"{path}{{value}}")
    if old != new:
        return [f"{path}: {str(old)[:80]} cannot become {str(new)[:80]}"], []
    return [], []


def _widens(old: str, new: str) -> bool:
    """Whether ``old`` reaches ``new`` through the widenings (transitively)."""
    decimals = _DECIMAL.fullmatch(old), _DECIMAL.fullmatch(new)
    if decimals[0] and decimals[1]:
        (p_old, s_old), (p_new, s_new) = (tuple(map(int, m.groups())) for m in decimals)  # type: ignore[union-attr]
        return s_new == s_old and p_new > p_old
    frontier, seen = [old], {old}
    while frontier:
        here = frontier.pop()
        for a, b in WIDENINGS:
            if a == here and b not in seen:
                if b == new:
                    return True
                seen.add(b)
                frontier.append(b)
    return False


def conform_rows(rows: pa.Table, schema: TableSchema | pa.Schema) -> pa.Table:
    """Rows acknowledged under an earlier schema of the table, as its current schema holds
    them: columns added since are null, widened ones cast. Updates in the WAL, the pending
    store, spill segments and quarantine keep the schema they were written with; every load
    path brings them to the table's schema here, once, rather than each in its own way."""
    target = schema if isinstance(schema, pa.Schema) else schema.arrow()
    nested = any(_nested(f.type) for f in target)
    if rows.schema.equals(target) and not nested:
        return rows
    for field in target:
        if field.name not in rows.column_names:
            rows = rows.append_column(pa.field(field.name, field.type), pa.nulls(rows.num_rows, field.type))
    rows = rows.select(target.names)
    if not nested:
        return rows.cast(target)
    columns = [
        pa.chunked_array([cast_nested(chunk, field.type) for chunk in column.chunks], field.type)
        if _nested(field.type)
        else column.cast(field.type)
        for column, field in zip(rows.columns, target)
    ]
    return pa.Table.from_arrays(columns, schema=target)


def _nested(kind: pa.DataType) -> bool:
    return pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_map(kind)


def cast_nested(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` as ``target``, level by level. pyarrow's cast (pyspark's too, on its way into
    Spark) refuses a NOT NULL part that holds null where its parent is null, though that null is
    no value at all (a reader of a Parquet file, Spark's among them, reads every nested field as
    nullable and leaves such nulls): those are given a value here (``_valid``), never seen."""
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        names = [f.name for f in array.type]
        children = []
        for field in target:
            if field.name not in names:  # a field added since the rows were acknowledged: null
                children.append(pa.nulls(len(array), field.type))
                continue
            child = cast_nested(array.field(names.index(field.name)), field.type)
            children.append(child if field.nullable or not child.null_count else _valid(child))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_map(target) and pa.types.is_map(array.type):
        offsets, entries = _from_zero(array)
        keys = cast_nested(entries.field(0), target.key_type)
        items = cast_nested(entries.field(1), target.item_type)
        if not target.item_field.nullable and items.null_count:
            items = _valid(items)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=mask)
    if pa.types.is_list(target) and pa.types.is_list(array.type) and not pa.types.is_map(array.type):
        offsets, values = _from_zero(array)
        values = cast_nested(values, target.value_type)
        if not target.value_field.nullable and values.null_count:
            values = _valid(values)
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    return array if array.type == target else pc.cast(array, target)


def _from_zero(array: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list's (or map's) offsets counted from 0 and the values they index. A slice of a list
    array (a chunk of a table cut into batches) has offsets that start past 0 into all of its
    parent's values, and pyarrow builds no list from such offsets with a null mask ("Null
    bitmap with offsets slice not supported")."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    if start == 0:
        return offsets, array.values.slice(0, end)
    return pc.subtract(offsets, pa.scalar(start, offsets.type)), array.values.slice(start, end - start)


def _valid(array: pa.Array) -> pa.Array:
    """``array`` with no null: each null slot keeps whatever its buffers hold (it lies under a null
    parent, where no reader looks)."""
    kind = array.type
    if pa.types.is_struct(kind):
        return pa.StructArray.from_arrays([array.field(i) for i in range(kind.num_fields)], fields=list(kind))
    if pa.types.is_map(kind):
        return pa.MapArray.from_arrays(array.offsets, array.values.field(0), array.values.field(1), type=kind)
    if pa.types.is_list(kind):
        return pa.ListArray.from_arrays(array.offsets, array.values, type=kind)
    return pa.Array.from_buffers(kind, len(array), [None, *array.buffers()[1:]], offset=array.offset)
