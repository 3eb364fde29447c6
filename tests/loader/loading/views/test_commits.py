"""A view reads its inputs' Delta log line by line: JSON lines, split at "\\n" only.

delta-rs writes a partition value's characters as they are, U+2028, U+2029 and U+0085
included, which ``str.splitlines`` also takes for line ends: a string partition value
holding one (intake takes it: it names a directory) made every read of that version fail
with a JSONDecodeError (issue 33's domain sweep found it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loader.loading.views.commits import added_files


@pytest.mark.parametrize("value", ["a\u2028b", "\x85", "\u2029"])
def test_a_partition_value_with_a_unicode_line_separator_is_read(tmp_path: Path, value: str) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_000_000, "loader.data_until": "12.5"}},
        {
            "add": {
                "path": "s=x/part-0.parquet",
                "partitionValues": {"s": value},
                "size": 1,
                "modificationTime": 0,
                "dataChange": True,
                "stats": json.dumps({"numRecords": 3}),
            }
        },
    ]
    # As delta-rs writes it: one JSON object per line, the value's characters unescaped.
    (log / f"{1:020d}.json").write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in actions), "utf-8")
    files, _, rows = added_files(tmp_path, 1)
    assert files == ["s=x/part-0.parquet"] and rows == 3
