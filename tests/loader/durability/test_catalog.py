"""The catalog file: what it holds after changes, encoding again only the entries that changed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from loader.core.tables import TableConfig
from loader.durability.catalog import Catalog, CatalogEntry, RetiredTable


def entry(name: str) -> CatalogEntry:
    table = TableConfig.model_validate({"name": name, "schema": {"columns": [{"name": "k", "type": "int64"}]}})
    return CatalogEntry.from_config(table, 1000.0)


def saved(catalog: Catalog) -> dict[str, dict]:
    return {e["name"]: e for e in json.loads(catalog.path.read_text(encoding="utf-8"))["tables"]}


def test_changed_entries_are_encoded_again_and_the_file_reads_back_whole(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.json")
    for k in range(100):
        catalog.add(entry(f"t{k:03d}"))
    catalog.policy, catalog.policy_params = "interval", {"period": 5.0}
    catalog.save()
    catalog.entries["t007"].last_seq = 42
    catalog.entries["t008"].last_seq = 43  # changed without saying so: the file keeps the old value
    catalog.changed("t007")
    catalog.save()
    assert saved(catalog)["t007"]["last_seq"] == 42 and saved(catalog)["t008"]["last_seq"] == 0
    catalog.changed()  # every entry
    catalog.save()
    assert saved(catalog)["t008"]["last_seq"] == 43
    again = Catalog.open(catalog.path)
    assert again.entries == catalog.entries
    assert (again.policy, again.policy_params) == ("interval", {"period": 5.0})
    assert list(again.entries) == [f"t{k:03d}" for k in range(100)]


def test_an_added_entry_is_saved_and_refresh_is_told_which_entries_changed(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.json")
    catalog.add(entry("a"))
    catalog.save()
    catalog.add(entry("b"))
    catalog.entries["a"].weight = 9.0
    catalog.changed("a")
    told: list[set[str]] = []
    asyncio.run(catalog.save_changes(lambda names: told.append(set(names))))
    assert told == [{"a", "b"}]
    assert saved(catalog)["a"]["weight"] == 9.0 and "b" in saved(catalog)
    asyncio.run(catalog.save_changes(lambda names: told.append(set(names))))
    assert len(told) == 1  # nothing changed since: no save


def test_a_removed_entry_leaves_the_file_and_its_record_reads_back(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.json")
    for name in ("a", "b"):
        catalog.add(entry(name))
    catalog.entries["a"].retiring = catalog.entries["a"].purge = True
    catalog.changed("a")
    catalog.save()
    assert saved(catalog)["a"]["retiring"] is True  # the decision is in the file (a restart resumes it)
    catalog.remove("a", RetiredTable("a", 17, 2000.0, purge=True))
    assert catalog.dirty and catalog.gone("a") is not None and catalog.gone("b") is None
    catalog.save()
    assert set(saved(catalog)) == {"b"}
    again = Catalog.open(catalog.path)
    assert again.retired == {"a": RetiredTable("a", 17, 2000.0, purge=True)}
    again.add(entry("a"))  # registered again: live, its record kept (the sequence floor)
    assert again.gone("a") is None and "a" in again.retired
