"""The service's page (api/routes/ui.py, api/ui/): served without a token with its files'
types, made only of files shipped in the package, calling only what the API has, and kept
out of the OpenAPI document. The page in a real browser: tests/deploy/test_ui_browser.py."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from api.routes.ui import ASSETS, UI_DIR
from testing.service_harness import OPERATOR, Harness

ROOT = Path(__file__).resolve().parents[2]
#: The one URL in the page's files that is not fetched: the SVG namespace.
NAMESPACES = {"http://www.w3.org/2000/svg"}


def _text(name: str) -> str:
    return (UI_DIR / name).read_text(encoding="utf-8")


def test_root_sends_the_browser_to_the_page(harness: Harness) -> None:
    redirect = harness.client.get("/", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "ui"  # relative: works under a prefix
    page = harness.client.get("/")
    assert page.status_code == 200 and str(page.url).endswith("/ui")
    assert page.headers["content-type"] == "text/html; charset=utf-8"


def test_the_page_and_its_files_load_without_a_token(harness: Harness) -> None:
    page = harness.client.get("/ui")
    assert page.status_code == 200, page.text
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="ui/app.js">' in page.text
    for response in [page, *(harness.client.get(f"/ui/{name}") for name in ASSETS)]:
        assert response.status_code == 200, response.url
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "script-src 'self'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-cache" and response.headers["etag"]
    types = {name: harness.client.get(f"/ui/{name}").headers["content-type"] for name in ASSETS}
    assert types["app.js"] == "text/javascript; charset=utf-8"
    assert types["style.css"] == "text/css; charset=utf-8"
    assert types["icon.svg"] == "image/svg+xml"


def test_only_the_pages_files_are_served(harness: Harness) -> None:
    for path in ("/ui/nope.js", "/ui/index.html", "/ui/..%2F..%2Fpyproject.toml", "/ui/%2e%2e"):
        response = harness.client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"] == "not_found"


def test_every_file_the_page_loads_is_served_and_every_served_file_is_loaded() -> None:
    """index.html's scripts, styles and icons and the modules' imports, followed from the page."""
    loaded: set[str] = set()
    queue = re.findall(r'(?:src|href)="ui/([^"]+)"', _text("index.html"))
    while queue:
        name = queue.pop()
        if name in loaded:
            continue
        loaded.add(name)
        if name.endswith(".js"):
            queue += re.findall(r'from "\./([^"]+)"', _text(name))
    assert loaded == set(ASSETS)
    assert {p.name for p in UI_DIR.iterdir()} == {*ASSETS, "index.html"}


def test_the_page_needs_nothing_from_outside_the_machine_and_writes_no_html() -> None:
    for path in UI_DIR.iterdir():
        text = path.read_text(encoding="utf-8")
        urls = set(re.findall(r"""(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s"'`)]*""", text))
        assert urls <= NAMESPACES, f"{path.name} refers outside the service: {urls - NAMESPACES}"
        assert "@import" not in text and "@font-face" not in text, path.name
        if path.suffix == ".js":  # names and messages come from outside: text only, never markup
            assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", text), path.name


def test_the_page_stays_out_of_the_api_document(harness: Harness) -> None:
    paths = harness.client.get("/openapi.json").json()["paths"]
    assert not {"/", "/ui", "/ui/{asset}"} & set(paths)


def test_the_api_answers_every_call_the_page_makes(harness: Harness) -> None:
    """Each path the page asks for exists, and /metrics answers with every family it reads:
    a renamed route or metric fails here rather than as an empty panel."""
    app = _text("app.js")
    called = set(re.findall(r'api\.get\("([^"]+)"', app))
    assert {"readyz", "v1/tables", "v1/tables:history", "metrics", "v1/admin/pending"} <= called
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    for path in called:
        assert harness.client.get(f"/{path}", headers=auth).status_code == 200, path
    families = re.findall(r'^\s+"(loader_[a-z_]+)",$', _text("metrics.js"), flags=re.MULTILINE)
    assert len(families) > 10
    text = harness.client.get("/metrics", params={"names": ",".join(families)}, headers=auth).text
    answered = {family.name for family in text_string_to_metric_families(text)}
    assert set(families) <= answered, f"the page reads families /metrics does not have: {set(families) - answered}"


def test_the_page_is_package_data() -> None:
    """An installed package (not only this checkout) serves the page."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    patterns = setup["package-data"]["api"]
    for path in UI_DIR.iterdir():
        relative = path.relative_to(ROOT / "api").as_posix()
        assert any(fnmatch(relative, pattern) for pattern in patterns), relative
