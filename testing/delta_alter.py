"""Another tool altering a Delta table the loader writes, as tests need it done from outside.

deltalake's ``alter`` covers CHECK constraints, table properties and the table features it
knows (``add_constraint``, ``set_table_properties``, ``add_feature``). What it cannot do (it
refuses to set ``delta.*`` column metadata, and knows only some features) is done here the
way any Delta writer does it: one new commit in ``_delta_log`` holding a ``metaData`` action
(and a ``protocol`` action if asked), created exclusively so that it never overwrites a
version another writer made.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deltalake import DeltaTable


def commit_metadata(
    path: Path,
    *,
    column_metadata: Mapping[str, Mapping[str, Any]] | None = None,
    configuration: Mapping[str, str | None] | None = None,
    protocol: Mapping[str, Any] | None = None,
) -> int:
    """Commit the table's metadata with ``column_metadata`` merged into its columns' metadata,
    ``configuration`` merged into its configuration (None removes a key), and ``protocol``
    (``minReaderVersion``, ``minWriterVersion``, ``readerFeatures``, ``writerFeatures``) as
    its new protocol; the version made."""
    delta = DeltaTable(str(path))
    metadata = delta.metadata()
    schema = json.loads(delta.schema().to_json())
    for field in schema["fields"]:
        extra = (column_metadata or {}).get(field["name"])
        if extra:
            field.setdefault("metadata", {}).update(extra)
    conf = dict(metadata.configuration)
    for key, value in (configuration or {}).items():
        if value is None:
            conf.pop(key, None)
        else:
            conf[key] = value
    actions: list[dict[str, Any]] = []
    if protocol is not None:
        actions.append({"protocol": dict(protocol)})
    actions.append(
        {
            "metaData": {
                "id": metadata.id,
                "name": metadata.name,
                "description": metadata.description,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": list(metadata.partition_columns),
                "configuration": conf,
                "createdTime": metadata.created_time,
            }
        }
    )
    actions.append(
        {
            "commitInfo": {
                "timestamp": int(time.time() * 1000),
                "operation": "SET TBLPROPERTIES",
                "operationParameters": {},
                "engineInfo": "warehouse-loader-tests",
            }
        }
    )
    version = delta.version() + 1
    entry = Path(path) / "_delta_log" / f"{version:020d}.json"
    fd = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # never over another writer's commit
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(a) for a in actions) + "\n")
    return version


def invariant(expression: str) -> dict[str, str]:
    """A column's ``delta.invariants`` metadata, in the protocol's JSON."""
    return {"delta.invariants": json.dumps({"expression": {"expression": expression}})}


def protocol_with(path: Path, *writer: str, reader: tuple[str, ...] = ()) -> dict[str, Any]:
    """The table's protocol raised to table features (reader 3 if ``reader`` names any, writer
    7) with the writer features its version implied, plus ``writer`` and ``reader``."""
    current = DeltaTable(str(path)).protocol()
    implied = {
        1: [],
        2: ["appendOnly", "invariants"],
        3: ["appendOnly", "invariants", "checkConstraints"],
    }.get(current.min_writer_version, list(current.writer_features or []))
    features = sorted({*implied, *(current.writer_features or []), *writer, *reader})
    out: dict[str, Any] = {"minReaderVersion": 3 if reader else 1, "minWriterVersion": 7, "writerFeatures": features}
    if reader:
        out["readerFeatures"] = sorted({*reader, *(current.reader_features or [])})
    return out
