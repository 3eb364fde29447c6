"""Request and response models: documentation (OpenAPI) and validation of small bodies.

Feed bodies are parsed by ``loader.intake`` (for 400-vs-422 and row-level messages);
their models here only describe them in the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loader.config import TableConfig


class FileSpec(BaseModel):
    path: str = Field(description="Path relative to (or inside) the landing directory.")
    format: str | None = Field(default=None, description="parquet, csv or json; default from the extension.")


class UpdateBody(BaseModel):
    """Exactly one of rows or files."""

    rows: list[dict[str, Any]] | None = None
    files: list[str | FileSpec] | None = None
    data_until: float | str | None = Field(
        default=None, description="End of the data interval (Unix seconds or ISO-8601); default: receive time."
    )


class TableUpdateBody(UpdateBody):
    table: str


class MultiUpdateBody(BaseModel):
    updates: list[TableUpdateBody]


class AckModel(BaseModel):
    table: str
    sequence: int
    release_time: float
    release_time_iso: str


class AcksModel(BaseModel):
    updates: list[AckModel]


class WeightBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: float = Field(gt=0, allow_inf_nan=False)


class PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str
    params: dict[str, Any] = Field(default_factory=dict)


class ErrorModel(BaseModel):
    error: str
    message: str


RegisterTableBody = TableConfig


def body_doc(
    model: type[BaseModel], *, ndjson: bool = False, parameters: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """OpenAPI of a route that parses its body (and ``parameters``) itself."""
    content: dict[str, Any] = {
        "application/json": {"schema": model.model_json_schema(ref_template="#/components/schemas/{model}")}
    }
    if ndjson:
        content["application/x-ndjson"] = {"schema": {"type": "string", "description": "One JSON row per line."}}
    doc: dict[str, Any] = {"requestBody": {"required": True, "content": content}}
    if parameters:
        doc["parameters"] = parameters
    return doc
