"""What a table is, as an operator declares it (the config file or ``POST /v1/admin/tables``).

Every stage reads this declaration: intake checks rows against its schema, the catalog
keeps it, the dispatcher starts the table's scheduler state from its weight and cost
estimates. New kinds of table extend it here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from loader.core.errors import Invalid
from loader.core.schema import TableSchema, UpsertStrategy, check_name
from schedulers.keys.queue import DEFAULT_KEY_POLICY, KeyPolicy

#: ``TableConfig.on_new_fields``.
NewFields = Literal["reject", "ignore", "add"]


class TableConfig(BaseModel):
    """A warehouse table as an operator declares it (config file or the admin API)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    schema_: TableSchema = Field(alias="schema")
    weight: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    period_hint: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    #: Initial processing-time estimates (replaced by measurements after a few batches).
    alpha: float = Field(default=0.01, ge=0.0, allow_inf_nan=False)
    overhead: float = Field(default=0.3, ge=0.0, allow_inf_nan=False)
    #: ``append`` keeps every row (a history); ``latest`` keeps the newest row per ``key``
    #: (UpStream's update semantics, docs/latest-tables.md): each load is an upsert.
    mode: Literal["append", "latest"] = "append"
    #: Latest tables: the NOT NULL columns naming a row.
    key: tuple[str, ...] = ()
    #: Latest tables: the NOT NULL column whose larger value is newer (event time, version);
    #: without it, the value that arrived last wins.
    order_by: str | None = None
    #: Latest tables: how a load replaces stored keys (``merge`` or ``deletion-vectors``,
    #: docs/latest-tables.md, "Choosing the upsert"); travels in the schema as key does.
    upsert: UpsertStrategy = "merge"
    #: Latest tables: where a key's new value waits (UpStream section 5, docs/latest-tables.md).
    key_policy: KeyPolicy = DEFAULT_KEY_POLICY
    #: Latest tables: the most keys one batch loads (None: every waiting key).
    max_keys_per_batch: int | None = Field(default=None, ge=1)
    #: Latest tables: initial seconds to load one key's value (the cost model of a latest
    #: table is overhead + seconds_per_key * keys; replaced by measurements).
    seconds_per_key: float = Field(default=0.0001, ge=0.0, allow_inf_nan=False)
    #: What a row's fields that the table lacks do (docs/tables.md, "Changing a table's
    #: schema"): ``reject`` them (422, the default), ``ignore`` them (dropped, the rest
    #: loads), or ``add`` them as nullable columns typed from their JSON values, before the
    #: update is acknowledged (loader/intake/inference.py).
    on_new_fields: NewFields = "reject"

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value, "table name")

    @model_validator(mode="after")
    def _mode(self) -> TableConfig:
        """The key and order_by are declared beside ``mode`` and travel in the schema (every
        writer needs them); a schema that carries them itself must agree."""
        if self.mode == "append":
            latest_only = {"key_policy", "max_keys_per_batch", "seconds_per_key", "upsert"} & self.model_fields_set
            if self.key or self.order_by is not None or latest_only:
                raise ValueError(
                    'key, order_by, key_policy, max_keys_per_batch, seconds_per_key and upsert are for mode = "latest" '
                    "tables; an append table keeps every row"
                )
            if self.schema_.latest:
                raise ValueError('declare key and order_by beside mode = "latest", not inside the schema')
            return self
        if not self.key:
            raise ValueError('a mode = "latest" table needs a key: the columns that name a row, e.g. key = ["id"]')
        inner = self.schema_
        if inner.latest and (inner.key, inner.order_by) != (self.key, self.order_by):
            raise ValueError("the schema's key and order_by differ from the ones declared beside mode")
        if inner.latest and "upsert" not in self.model_fields_set:
            object.__setattr__(self, "upsert", inner.upsert)  # (a schema that carries its own)
        elif inner.latest and inner.upsert != self.upsert:
            raise ValueError("the schema's upsert differs from the one declared beside mode")
        # Validated again as a whole: the key's columns must exist and be NOT NULL.
        data = inner.model_dump(mode="json") | {"key": list(self.key), "order_by": self.order_by, "upsert": self.upsert}
        object.__setattr__(self, "schema_", TableSchema.model_validate(data))
        return self


#: Entries a refusal of a bulk registration describes in its message (all are in ``detail``).
NAMED_IN_MESSAGE = 5


def table_declarations(document: object) -> list[TableConfig]:
    """Every declaration of ``{"tables": [...]}`` (the shape of the TOML ``tables`` list), or
    one ``Invalid`` naming each bad entry by index and name: all or nothing."""
    if not isinstance(document, dict) or set(document) != {"tables"} or not isinstance(document["tables"], list):
        raise Invalid('send {"tables": [<table declaration>, ...]}, the shape of the configuration\'s tables list')
    items: list[Any] = document["tables"]
    declared: list[TableConfig] = []
    problems: dict[int, list[str]] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        try:
            declared.append(TableConfig.model_validate(item))
        except ValidationError as exc:
            problems[index] = [f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()]
        name = _name(item)
        if name is not None and name in first:
            problems.setdefault(index, []).append(f"name: declared before, at #{first[name]}")
        elif name is not None:
            first[name] = index
    if problems:
        entries = [{"index": i, "name": _name(items[i]), "problems": found} for i, found in sorted(problems.items())]
        named = "; ".join(
            f"#{e['index']}" + (f" {e['name']!r}" if e["name"] is not None else "") + f": {', '.join(e['problems'])}"
            for e in entries[:NAMED_IN_MESSAGE]
        )
        hidden = len(entries) - NAMED_IN_MESSAGE
        more = f" (and {hidden} more, all in detail)" if hidden > 0 else ""
        raise Invalid(
            f"{len(entries)} of {len(items)} table declarations are invalid, so none was registered: {named}{more}",
            detail=entries,
        )
    return declared


def _name(item: object) -> str | None:
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) else None
