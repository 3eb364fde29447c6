"""The container deployment, checked without a Docker engine (this project's machines have none).

docker-compose.yml, deploy/Dockerfile and deploy/loader.docker.toml must agree with each other,
with the repository (every path they name exists and reaches the build context) and with the
service (its default port, its routes, which routes need a token, its configuration schema).
``docker compose config`` runs too where the Compose plugin is installed.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import pyspark
import pytest
import yaml
from fastapi.testclient import TestClient

from api.app import create_app
from loader.config import Role, Settings, load_settings
from loader.loading.sinks.probe import MISSING_JARS
from testing.fakes import ArrowSink

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
CONTAINER_CONFIG = ROOT / "deploy" / "loader.docker.toml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"

# What the .env of deploy/README.md would hold (distinct, 16+ characters, as the service demands).
SAMPLE_ENV = {
    "LOADER_OPERATOR_TOKEN": "operator-token-for-the-deploy-test",
    "LOADER_PRODUCER_TOKEN": "producer-token-for-the-deploy-test",
    "LOADER_METRICS_TOKEN": "metrics-token-for-the-deploy-test",
    "GRAFANA_ADMIN_PASSWORD": "grafana-password-for-the-deploy-test",
}

# Attributes of the Compose specification this file may use: a misspelt key fails here.
SERVICE_KEYS = {
    "build", "image", "init", "restart", "stop_grace_period", "stop_signal", "ports", "expose", "environment",
    "env_file", "volumes", "healthcheck", "depends_on", "secrets", "configs", "command", "entrypoint", "user",
    "working_dir", "networks", "labels", "logging", "deploy", "ulimits", "mem_limit", "cpus", "read_only", "tmpfs",
    "hostname",
}  # fmt: skip
HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period", "start_interval", "disable"}
TOP_LEVEL_KEYS = {"name", "services", "volumes", "secrets", "configs", "networks"}

VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")


# ---------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${VAR}``, ``${VAR:?err}`` and ``${VAR:-default}``, applied to every string."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"]
        if name in env and (env[name] or ":" not in op):
            return env[name]
        if op.endswith("?"):
            raise KeyError(f"{name} is required: {arg}")
        return arg if op.endswith("-") else ""

    return VARIABLE.sub(one, value)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each volume entry, short or long syntax."""
    result = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            result.append((str(entry.get("source", "")), str(entry["target"])))
        else:
            source, target = entry.split(":")[:2]
            result.append((source, target))
    return result


def is_host_path(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def container_ports(service: dict[str, Any]) -> set[int]:
    ports = set()
    for entry in service.get("ports") or []:
        target = entry["target"] if isinstance(entry, dict) else str(entry).split(":")[-1].split("/")[0]
        ports.add(int(target))
    return ports


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        word, _, rest = pending.strip().partition(" ")
        instructions.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "deploy/Dockerfile ends inside a continued line"
    return instructions


def instruction(name: str) -> list[str]:
    return [args for word, args in dockerfile() if word == name]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def dockerignored(path: str) -> bool:
    ignored = False
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        parts = PurePosixPath(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.removeprefix("**/")) for p in prefixes):
            ignored = not negate
    return ignored


def app_paths() -> set[str]:
    with pytest.MonkeyPatch.context() as mp:
        for key in SAMPLE_ENV:
            mp.delenv(key, raising=False)
        settings = Settings(auth_tokens=[{"token": "x" * 16, "role": "operator"}])
        return set(create_app(settings, load=False).openapi()["paths"])


def loader_settings(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> Settings:
    """The settings the loader container starts with: the mounted config under compose's environment."""
    monkeypatch.delenv("LOADER_TOKEN", raising=False)
    for name in Settings.model_fields:
        monkeypatch.delenv(f"LOADER_{name.upper()}", raising=False)
    for key, value in interpolate(environment(compose["services"]["loader"]), SAMPLE_ENV).items():
        monkeypatch.setenv(key, value)
    return load_settings(CONTAINER_CONFIG, **overrides)


def pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = {}
    for requirement in project["dependencies"]:
        match = re.fullmatch(
            r"([A-Za-z0-9_.-]+)(?:\[[A-Za-z0-9_,.-]+\])?==([0-9][A-Za-z0-9.]*)", requirement.replace(" ", "")
        )
        if match:
            found[match[1].lower()] = match[2]
    return found


# ---------------------------------------------------------------------------- docker-compose.yml


def test_compose_uses_only_known_keys(compose: dict[str, Any]) -> None:
    unknown = {k for k in compose if not k.startswith("x-")} - TOP_LEVEL_KEYS
    assert not unknown, f"unknown top-level keys {unknown}"
    for name, service in compose["services"].items():
        assert not set(service) - SERVICE_KEYS, f"service {name}: unknown keys {set(service) - SERVICE_KEYS}"
        assert not set(service.get("healthcheck", {})) - HEALTHCHECK_KEYS, f"service {name}: healthcheck keys"
        assert "image" in service or "build" in service, f"service {name} has neither image nor build"


def test_compose_services_volumes_and_healthcheck(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"loader", "prometheus", "grafana"} <= set(services)
    loader = services["loader"]
    assert loader["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")

    declared = set(compose.get("volumes") or {})
    used = {source for service in services.values() for source, _ in mounts(service) if not is_host_path(source)}
    assert used <= declared, f"volumes used but not declared: {used - declared}"
    assert declared <= used, f"volumes declared but not used: {declared - used}"
    # The warehouse and WAL live on a named volume at the container's data_dir.
    data = [source for source, target in mounts(loader) if target == "/data"]
    assert data and data[0] in declared, "the loader's /data must be a named volume"

    test = loader["healthcheck"]["test"]
    assert test[0] == "CMD" and "/healthz" in " ".join(test)
    assert test == ["CMD", *exec_form(instruction("HEALTHCHECK")[0].split(" CMD ", 1)[1])], (
        "the compose healthcheck should be the Dockerfile's"
    )
    secrets = set(compose.get("secrets") or {})
    for name, service in services.items():
        for secret in service.get("secrets") or []:
            assert (secret if isinstance(secret, str) else secret["source"]) in secrets, f"{name}: secret {secret}"


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_compose_runs_the_loader_against_a_spark_cluster(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spark-master, spark-worker and spark-connect on the loader's image, wired to each other
    and to the loader, sharing the loader's volume at the loader's data_dir."""
    services = compose["services"]
    master, worker, connect = services["spark-master"], services["spark-worker"], services["spark-connect"]
    image = services["loader"]["image"]
    assert master["image"] == worker["image"] == connect["image"] == image, "one image holds Spark, Java and Delta"

    master_argv = master["entrypoint"]
    assert master_argv[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    master_url = f"spark://{_option(master_argv, '--host')}:{_option(master_argv, '--port')}"
    assert _option(master_argv, "--host") == master["hostname"] == "spark-master"
    assert worker["entrypoint"][:3] == ["spark-class", "org.apache.spark.deploy.worker.Worker", master_url]
    connect_argv = connect["entrypoint"]
    assert connect_argv[:2] == ["loader", "spark-connect"] and _option(connect_argv, "--master") == master_url
    assert _option(connect_argv, "--config") == "/etc/loader/loader.toml"
    assert ("./deploy/loader.docker.toml", "/etc/loader/loader.toml") in mounts(connect), "the loader's Spark settings"

    settings = loader_settings(compose, monkeypatch)
    assert settings.spark.mode == "connect"
    assert settings.spark.remote == f"sc://{connect['hostname']}:{_option(connect_argv, '--port')}"
    data = {name: dict((t, s) for s, t in mounts(services[name])).get(str(settings.data_dir)) for name in services}
    assert data["loader"] is not None
    assert data["loader"] == data["spark-worker"] == data["spark-connect"], "executors need the warehouse's path"


def test_every_host_path_in_compose_exists(compose: dict[str, Any]) -> None:
    missing = []
    for name, service in compose["services"].items():
        build = service.get("build")
        if build:
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            if not context.is_dir():
                missing.append(f"{name}: build context {context}")
            if isinstance(build, dict) and not (context / build.get("dockerfile", "Dockerfile")).is_file():
                missing.append(f"{name}: dockerfile {build['dockerfile']}")
        for source, target in mounts(service):
            if is_host_path(source) and not (ROOT / source).exists():
                missing.append(f"{name}: {source} (mounted at {target})")
    for name, secret in (compose.get("secrets") or {}).items():
        if "file" in secret and not (ROOT / secret["file"]).exists():
            missing.append(f"secret {name}: {secret['file']}")
    assert not missing, "docker-compose.yml names paths missing from the repository:\n" + "\n".join(missing)


def test_compose_demands_every_secret_and_nothing_else(compose: dict[str, Any]) -> None:
    """Tokens and passwords have no defaults: `docker compose up` without them stops with the reason."""
    text = COMPOSE.read_text(encoding="utf-8")
    # ${...} in comments do not count; only the values compose interpolates.
    names = {m["name"] for m in VARIABLE.finditer(yaml.safe_dump(compose))}
    assert names == set(SAMPLE_ENV), names
    for match in VARIABLE.finditer(text):
        assert match["op"] == ":?", f"${{{match['name']}}} should be required (:?)"
    with pytest.raises(KeyError, match="LOADER_METRICS_TOKEN"):
        interpolate(compose, {k: v for k, v in SAMPLE_ENV.items() if k != "LOADER_METRICS_TOKEN"})
    metrics_secret = compose["secrets"]["loader_metrics_token"]
    assert metrics_secret == {"environment": "LOADER_METRICS_TOKEN"}


def test_ports_match_the_service_defaults(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    default = Settings.model_fields["port"].default
    assert default == 8000
    settings = loader_settings(compose, monkeypatch)
    assert settings.port == default and settings.host == "0.0.0.0"
    assert container_ports(compose["services"]["loader"]) == {default}
    assert instruction("EXPOSE") == [str(default)]
    assert f"127.0.0.1:{default}/healthz" in instruction("HEALTHCHECK")[0]
    assert container_ports(compose["services"]["prometheus"]) == {9090}
    assert container_ports(compose["services"]["grafana"]) == {3000}


# ---------------------------------------------------------------------------- the loader's configuration


def test_container_config_validates_under_the_compose_environment(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = loader_settings(compose, monkeypatch)
    loader = compose["services"]["loader"]
    assert str(settings.data_dir) in {target for _, target in mounts(loader)}
    assert instruction("VOLUME") == [str(settings.data_dir)]
    tokens = {t.name: t for t in settings.auth_tokens}
    assert {name: t.role for name, t in tokens.items()} == {
        "operator": Role.operator,
        "producer": Role.producer,
        "prometheus": Role.producer,
    }
    assert tokens["prometheus"].tables == [] and tokens["prometheus"].token == SAMPLE_ENV["LOADER_METRICS_TOKEN"]
    # The native writer, with the jars the image bakes.
    assert settings.writer == "delta-spark"
    classpath = settings.spark.conf["spark.driver.extraClassPath"]
    assert classpath == settings.spark.conf["spark.executor.extraClassPath"]
    jars = str(PurePosixPath(classpath).parent)
    assert PurePosixPath(classpath).name == "*", "a JVM class path takes every jar of a directory as <dir>/*"
    assert f"--from=build {jars} {jars}" in instruction("COPY"), f"the image has no {jars} from the build stage"
    fetches = [shlex.split(run)[-3:] for run in instruction("RUN") if " fetch " in run]
    assert fetches == [["fetch", "$DELTA_PACKAGE", jars]], f"the build should fetch the Delta jars into {jars}"
    assert settings.spark.conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def test_container_config_also_validates_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(f"LOADER_{name.upper()}", raising=False)
    settings = load_settings(CONTAINER_CONFIG)
    assert settings.auth_tokens == []  # tokens come only from the environment, never from the repository


def test_the_config_path_is_one_in_image_entrypoint_and_compose(compose: dict[str, Any]) -> None:
    entrypoint = exec_form(instruction("ENTRYPOINT")[0])
    assert entrypoint[:2] == ["loader", "serve"]
    config = entrypoint[entrypoint.index("--config") + 1]
    assert entrypoint[entrypoint.index("--host") + 1] == "0.0.0.0"
    assert f"deploy/loader.docker.toml {config}" in instruction("COPY")
    assert ("./deploy/loader.docker.toml", config) in mounts(compose["services"]["loader"])


def test_tokens_from_compose_work_against_the_service(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The health check needs no token; Prometheus' token reads /metrics and can submit nothing."""
    settings = loader_settings(compose, monkeypatch, data_dir=tmp_path)
    bearer = {
        name: {"Authorization": f"Bearer {SAMPLE_ENV[f'LOADER_{name.upper()}_TOKEN']}"}
        for name in ("operator", "producer", "metrics")
    }
    with TestClient(create_app(settings, sink_factory=lambda s: ArrowSink(s.warehouse_path))) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer["metrics"]).status_code == 200
        table = {"name": "orders", "schema": {"columns": [{"name": "order_id", "type": "int64"}]}}
        assert client.post("/v1/admin/tables", json=table, headers=bearer["operator"]).status_code == 201
        update = {"rows": [{"order_id": 1}]}
        assert client.post("/v1/tables/orders/updates", json=update, headers=bearer["metrics"]).status_code == 403
        assert client.post("/v1/tables/orders/updates", json=update, headers=bearer["producer"]).status_code == 202
        assert client.post("/v1/admin/tables", json=table, headers=bearer["producer"]).status_code == 403


# ---------------------------------------------------------------------------- deploy/Dockerfile


def test_dockerfile_base_java_user_and_entrypoint() -> None:
    froms = instruction("FROM")
    assert froms[0] == "python:3.11-slim-bookworm AS base"
    assert all(f.split()[0] in {"python:3.11-slim-bookworm", "base"} for f in froms)
    assert any("openjdk-17-jre-headless" in run for run in instruction("RUN"))
    assert any("pip install ." in run for run in instruction("RUN"))
    users = instruction("USER")
    assert users and users[-1] not in {"root", "0"}, "the service must not run as root"
    stages = [f.split()[-1] for f in froms if " AS " in f]
    for args in instruction("COPY"):
        for flag in re.findall(r"--from=(\S+)", args):
            assert flag in stages, f"COPY --from={flag}: no such stage"


def test_dockerfile_copy_sources_exist_and_reach_the_build_context() -> None:
    sources = []
    for args in instruction("COPY"):
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        if "--from=" in args:
            continue
        sources += words[:-1]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        assert not dockerignored(source), f"COPY {source}: excluded by .dockerignore"
    # pip install . needs the packages setuptools finds and the readme pyproject.toml names.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert needed <= set(sources), f"the build stage lacks {needed - set(sources)}"


def test_healthcheck_path_is_a_route_that_needs_no_token() -> None:
    healthcheck = instruction("HEALTHCHECK")[0]
    url = re.search(r"https?://[^'\"\s]+", healthcheck)
    assert url, healthcheck
    path = urlparse(url[0]).path
    assert path in app_paths()
    assert path == "/healthz"  # the one route without a token (see test_tokens_from_compose_work_against_the_service)


def test_delta_jars_match_the_python_pins() -> None:
    pinned = pins()
    spark = ".".join(pinned["pyspark"].split(".")[:2])
    package = f"io.delta:delta-spark_{spark}_2.13:{pinned['delta-spark']}"
    args = [a for a in instruction("ARG") if a.startswith("DELTA_PACKAGE=")]
    assert args == [f"DELTA_PACKAGE={package}"], f"deploy/Dockerfile should bake {package}"
    # The build step derives the same coordinate from what pip installed and refuses others.
    spec = importlib.util.spec_from_file_location("delta_jars", ROOT / "deploy" / "delta_jars.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.expected_package() == package
    with pytest.raises(SystemExit, match="does not match"):
        module.fetch("io.delta:delta-spark_2.13:0.0.1", Path("/nonexistent"))
    # Jars Spark ships itself stay out of the class path that comes before Spark's own.
    spark_jars = Path(pyspark.__file__).parent / "jars"
    resolved = [
        Path(f"io.delta_delta-spark_{spark}_2.13-{pinned['delta-spark']}.jar"),
        Path(f"io.delta_delta-storage-{pinned['delta-spark']}.jar"),
        Path("com.fasterxml.jackson.core_jackson-databind-2.13.5.jar"),
        Path("org.apache.logging.log4j_log4j-slf4j2-impl-2.25.3.jar"),
        Path("org.antlr_antlr4-runtime-4.13.1.jar"),
    ]
    keep, drop = module.not_in_spark(resolved, spark_jars)
    assert [j.name for j in keep] == [resolved[0].name, resolved[1].name]
    assert len(drop) == 3
    # The service's own advice and the example configuration name the same package.
    assert package in MISSING_JARS
    assert package in (ROOT / "deploy" / "loader.example.toml").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- Prometheus and Grafana


def secret_targets(service: dict[str, Any]) -> set[str]:
    """Where compose writes each of the service's secrets inside the container."""
    targets = set()
    for entry in service.get("secrets") or []:
        source, target = (entry, None) if isinstance(entry, str) else (entry["source"], entry.get("target"))
        target = target or source
        targets.add(target if target.startswith("/") else f"/run/secrets/{target}")
    return targets


def test_prometheus_scrapes_the_loader_with_its_token(compose: dict[str, Any]) -> None:
    assert PROMETHEUS_CONFIG.is_file(), f"{PROMETHEUS_CONFIG.relative_to(ROOT)} is missing"
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    prometheus = compose["services"]["prometheus"]
    # Prometheus resolves relative paths in its config against the config file's directory.
    config_target = next(t for s, t in mounts(prometheus) if s == "./deploy/prometheus/prometheus.yml")
    assert config_target == "/etc/prometheus/prometheus.yml", "the image's default --config.file"
    here = PurePosixPath(config_target).parent

    loader_port = Settings.model_fields["port"].default
    jobs = [
        job
        for job in config.get("scrape_configs") or []
        for group in job.get("static_configs") or []
        if f"loader:{loader_port}" in group.get("targets", [])
    ]
    assert jobs, f"no scrape job targets loader:{loader_port} (the compose service name and port)"
    secrets = secret_targets(prometheus)
    for job in jobs:
        assert job.get("metrics_path", "/metrics") in app_paths()
        auth = job.get("authorization") or {}
        credentials = str(here / auth.get("credentials_file", "-"))
        assert auth.get("type", "Bearer") == "Bearer" and credentials in secrets, (
            f"job {job.get('job_name')}: /metrics needs a bearer token; its credentials_file ({credentials}) "
            f"should be where compose writes the metrics token secret ({sorted(secrets)})"
        )
    secret = next(e for e in prometheus["secrets"] if isinstance(e, dict) and e.get("target") == credentials)
    assert compose["secrets"][secret["source"]] == {"environment": "LOADER_METRICS_TOKEN"}
    assert secret.get("mode", 0o444) & 0o004, "Prometheus runs as nobody: the token file must be world-readable"

    # Rule files are mounted where the config says they are.
    mounted = {t: s for s, t in mounts(prometheus)}
    rules = config.get("rule_files") or []
    assert rules, "prometheus.yml loads no alert rules"
    for rule in rules:
        target = str(here / rule)
        assert target in mounted, f"rule file {rule} ({target}) is not mounted into the prometheus service"
        assert (ROOT / mounted[target]).is_file()


def test_grafana_provisioning_points_at_the_mounts(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    assert ("./deploy/grafana/provisioning", "/etc/grafana/provisioning") in mounts(grafana)
    dashboards = next((t for s, t in mounts(grafana) if s == "./deploy/grafana/dashboards"), None)
    assert dashboards == "/var/lib/grafana/dashboards"
    assert (ROOT / "deploy" / "grafana" / "dashboards").is_dir(), "deploy/grafana/dashboards is missing"
    assert list((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json")), "no dashboard JSON"

    def provisioning(kind: str) -> list[dict[str, Any]]:
        folder = GRAFANA_PROVISIONING / kind
        files = sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml"))
        assert files, f"no provisioning files in {folder.relative_to(ROOT)}"
        return [yaml.safe_load(f.read_text(encoding="utf-8")) or {} for f in files]

    providers = [p for doc in provisioning("dashboards") for p in doc.get("providers") or []]
    assert providers and all((p.get("options") or {}).get("path") == dashboards for p in providers)
    sources = [d for doc in provisioning("datasources") for d in doc.get("datasources") or []]
    prometheus_sources = [d for d in sources if d.get("type") == "prometheus"]
    assert prometheus_sources
    for source in prometheus_sources:
        url = urlparse(source["url"])
        assert (url.hostname, url.port) == ("prometheus", 9090), source["url"]


# ---------------------------------------------------------------------------- docker compose itself


def test_docker_compose_config_accepts_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine; the structure is checked above")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"the docker compose plugin is not installed ({probe.stderr.strip() or probe.stdout.strip()})")
    for key, value in SAMPLE_ENV.items():
        monkeypatch.setenv(key, value)
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
