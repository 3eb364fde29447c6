"""Configuration: the shipped example is valid, the environment wins, mistakes are named."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from loader.config import ConfigError, load_settings
from loader.durability.wal import Durability

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "loader.example.toml"


def test_the_shipped_example_is_valid() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.wal.durability is Durability.fsync and settings.policy == "myopic"
    orders = settings.tables[0]
    assert orders.name == "orders" and list(orders.schema_.partition_by) == ["country"]
    assert {t.role.value for t in settings.auth_tokens} == {"operator", "producer"}
    assert settings.spill.policy == "buffered-head" and not settings.pressure.enabled


def test_defaults_need_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("LOADER_WORKERS", "LOADER_POLICY", "LOADER_SPARK__MASTER"):
        monkeypatch.delenv(key, raising=False)
    settings = load_settings(None)
    assert (settings.port, settings.workers, settings.spark.master) == (8000, 2, "local[*]")
    assert settings.warehouse_path == Path.cwd() / "data" / "warehouse"


def test_every_directory_is_absolute_anchored_where_the_settings_were_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paths cross into worker processes and the Spark Connect server, whose working
    directories are not the loader's: a relative hand-off file was not found there."""
    monkeypatch.chdir(tmp_path)
    settings = load_settings(
        None, data_dir=Path("d"), warehouse_dir=Path("w"), landing_dir=Path("l"), wal={"dir": "x"}, spill={"dir": "s"}
    )
    paths = (settings.data_dir, settings.warehouse_path, settings.landing_path, settings.wal_path)
    assert paths == (tmp_path / "d", tmp_path / "w", tmp_path / "l", tmp_path / "x")
    assert (settings.spill_path, settings.state_path) == (tmp_path / "s", tmp_path / "d" / "state")
    monkeypatch.chdir("/")
    assert settings.spill_path == tmp_path / "s"  # fixed once read


def test_environment_overrides_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADER_WORKERS", "6")
    monkeypatch.setenv("LOADER_SPARK__MASTER", "spark://spark-master:7077")
    monkeypatch.setenv("LOADER_DURABILITY", "flush")
    settings = load_settings(EXAMPLE)
    assert settings.workers == 6
    assert settings.spark.master == "spark://spark-master:7077"
    assert settings.spark.conf  # the file's other spark settings stay
    assert settings.wal.durability is Durability.flush


def test_lean_writes_default_on_and_switch_per_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loader.loading.spark import DEFAULT_LEAN

    monkeypatch.delenv("LOADER_SPARK__LEAN_WRITES", raising=False)
    assert load_settings(None).spark.lean == DEFAULT_LEAN
    path = tmp_path / "loader.toml"
    path.write_text('[spark]\nlean_writes = ["cached_table", "no_call_sites"]\n', encoding="utf-8")
    assert load_settings(path).spark.lean == {"cached_table", "no_call_sites"}
    monkeypatch.setenv("LOADER_SPARK__LEAN_WRITES", "false")
    assert load_settings(path).spark.lean == frozenset()


def test_settings_of_earlier_releases_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flat names before [intake] and [wal] existed are aliases, in the file, as keyword
    arguments and as LOADER_<NAME>; the new spelling of the environment wins over the old."""
    path = tmp_path / "old.toml"
    path.write_text(
        'durability = "flush"\nwal_segment_bytes = 131072\nwal_dir = "w"\nmax_body_bytes = 4096\n'
        "max_landing_file_bytes = 10\nmax_clock_skew_seconds = 1.5\n",
        encoding="utf-8",
    )
    settings = load_settings(path)
    assert (settings.wal.durability, settings.wal.segment_bytes, settings.wal_path) == (
        Durability.flush,
        131072,
        Path.cwd() / "w",
    )
    assert (settings.intake.max_body_bytes, settings.intake.max_landing_file_bytes) == (4096, 10)
    assert settings.intake.max_clock_skew_seconds == 1.5
    assert load_settings(None, max_body_bytes=2048, wal_dir=tmp_path).intake.max_body_bytes == 2048
    monkeypatch.setenv("LOADER_DURABILITY", "fsync")
    monkeypatch.setenv("LOADER_MAX_BODY_BYTES", "8192")
    settings = load_settings(path)
    assert settings.wal.durability is Durability.fsync and settings.intake.max_body_bytes == 8192  # env beats file
    monkeypatch.setenv("LOADER_WAL__DURABILITY", "flush")
    assert load_settings(path).wal.durability is Durability.flush


def test_old_names_as_keyword_arguments_keep_the_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review findings: an old name given to ``Settings(...)`` met the environment only after
    the sources were merged (a spurious "give it once"), a section given as a model counted
    its defaults as given, and command-line overrides depended on their order."""
    from loader.config import Settings, WalConfig

    monkeypatch.setenv("LOADER_WAL__DURABILITY", "fsync")
    assert Settings(durability="flush").wal.durability is Durability.fsync  # the environment wins
    monkeypatch.delenv("LOADER_WAL__DURABILITY")
    monkeypatch.setenv("loader_durability", "fsync")  # environment names are case-insensitive
    assert Settings(durability="flush").wal.durability is Durability.fsync
    monkeypatch.delenv("loader_durability")
    both = Settings(durability="flush", wal=WalConfig(dir=Path("w")))
    assert (both.wal.durability, both.wal.dir) == (Durability.flush, Path.cwd() / "w")
    for overrides in ({"durability": "flush", "wal": {"dir": "w"}}, {"wal": {"dir": "w"}, "durability": "flush"}):
        settings = load_settings(None, **overrides)
        assert (settings.wal.durability, settings.wal.dir) == (Durability.flush, Path.cwd() / "w")
    with pytest.raises(ConfigError, match="give it once"):
        load_settings(None, durability="flush", wal={"durability": "fsync"})


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("wokers = 4\n", "wokers"),
        ('policy = "fastest"\n', "unknown policy 'fastest'"),
        ("workers = 0\n", "workers"),
        ('durability = "maybe"\n', "wal.durability"),
        ('[wal]\ndurability = "maybe"\n', "wal.durability"),
        ('durability = "flush"\n[wal]\ndurability = "fsync"\n', "give it once, as wal.durability"),
        ("[intake]\nmax_body_bytes = 10\n", "intake.max_body_bytes"),
        ("workers = [\n", "not valid TOML"),
        ('[spill]\npolicy = "lru"\n', "spill.policy"),
        ('data_dir = "d"\n[spill]\ndir = "d"\n', "overlaps data_dir"),
        ('data_dir = "d"\n[spill]\ndir = "d/wal/s"\n', "overlaps the WAL directory"),
        ('data_dir = "d/x"\n[spill]\ndir = "d"\n', "overlaps data_dir"),
        ("[spill]\nmemory_budget_bytes = 10\n", "spill.memory_budget_bytes"),
        ("[spill]\nc0_seconds = 0.001\n", "set both c0_seconds and c1_seconds_per_byte"),
        ("[pressure]\nhigh_watermark = 0.4\nlow_watermark = 0.6\n", "low_watermark must be below"),
        (
            '[[tables]]\nname = "a"\nschema.columns = [{ name = "x", type = "int64" }]\n'
            '[[tables]]\nname = "a"\nschema.columns = [{ name = "x", type = "int64" }]\n',
            "tables declared twice",
        ),
        (
            '[[tables]]\nname = "a"\nschema.columns = [{ name = "x", type = "decimal" }]\n',
            "tables.0.schema.columns.0.type",
        ),
        ('[[auth_tokens]]\ntoken = "short"\nrole = "operator"\n', "auth_tokens.0.token"),
        ('[spark]\nlean_writes = ["fast"]\n', "unknown lean_writes change(s) ['fast']"),
        ("[loading]\njob_timeout_seconds = -1\n", "loading.job_timeout_seconds"),
        ('[spark]\nmode = "remote"\n', "spark.mode"),
        ('[spark]\nmode = "connect"\nremote = "localhost:15002"\n', "spark.remote"),
        ('[spark]\nmode = "classic"\nremote = "sc://spark:15002"\n', 'set mode = "connect"'),
        (
            '[intake]\nmax_nesting_depth = 1\n[[tables]]\nname = "a"\nschema.columns = [{ name = "x", type = '
            '{ type = "array", elementType = { type = "array", elementType = "long" } } }]\n',
            "table 'a': columns ['x'] nest types deeper than 1 levels (intake.max_nesting_depth)",
        ),
        (
            '[intake]\nmax_schema_fields = 2\n[[tables]]\nname = "a"\nschema.columns = [{ name = "x", type = '
            '{ type = "map", keyType = "string", valueType = "long" } }]\n',
            "more than 2 (intake.max_schema_fields)",
        ),
    ],
)
def test_mistakes_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "loader.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert fragment in str(err.value) and str(path) in str(err.value)


def test_serve_with_a_bad_config_exits_2_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = CliRunner().invoke(app, ["serve", "--config", str(missing)])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('policy = "fastest"\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["serve", "--config", str(bad)])
    assert result.exit_code == 2 and "unknown policy" in result.output
    assert "Traceback" not in result.output
