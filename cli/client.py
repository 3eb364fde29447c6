"""The operators' HTTP client (tables, status, exports) for the CLI and the demo; rows go through ``producer``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from api.auth import tokens_file
from loader.config import Role, Settings


class ClientError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        message = (body.get("message") or body.get("detail")) if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


def token_for(settings: Settings, role: Role) -> str:
    """The configured (or generated) token of a role, for local tools."""
    tokens = settings.auth_tokens
    if not tokens:
        path = tokens_file(settings)
        if not path.exists():
            raise RuntimeError(f"no token given and {path} does not exist; start the service once or pass --token")
        tokens_raw = json.loads(path.read_text(encoding="utf-8"))
        for item in tokens_raw:
            if item["role"] == role.value:
                return item["token"]
    for token in tokens:
        if token.role is role:
            return token.token
    raise RuntimeError(f"no {role.value} token configured; pass --token")


class LoaderClient:
    """Operators' calls (tables, status, exports); producers send through ``producer``."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url, self.token = base_url, token
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def _check(self, response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            raise ClientError(response.status_code, body)
        return body

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"service at {self.http.base_url} not ready after {timeout:.0f}s")
            time.sleep(0.2)

    def register_table(self, definition: dict[str, Any]) -> Any:
        return self._check(self.http.post("/v1/admin/tables", json=definition))

    def download(self, path: str, params: dict[str, Any], out: Path) -> dict[str, str]:
        """Stream a GET into ``out`` (written whole or not at all); returns the response headers."""
        partial = out.with_name(f".{out.name}.partial")
        with self.http.stream("GET", path, params={k: v for k, v in params.items() if v is not None}) as response:
            if response.status_code >= 400:
                response.read()
                self._check(response)
            try:
                with partial.open("wb") as handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
                partial.replace(out)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            return dict(response.headers)

    def tables(self) -> list[dict[str, Any]]:
        """Every table's status, following the pages of GET /v1/tables."""
        tables: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 10_000}
        while True:
            page = self._check(self.http.get("/v1/tables", params=params))
            tables.extend(page["tables"])
            if not page.get("next_cursor"):
                return tables
            params["cursor"] = page["next_cursor"]
