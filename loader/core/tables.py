"""What a table is, as an operator declares it (the config file or ``POST /v1/admin/tables``).

Every stage reads this declaration: intake checks rows against its schema, the catalog
keeps it, the dispatcher starts the table's scheduler state from its weight and cost
estimates. New kinds of table extend it here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loader.core.schema import TableSchema, check_name


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

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value, "table name")
