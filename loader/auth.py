"""Bearer-token authentication with two roles.

When the configuration names no tokens the service does not run open: it generates
one operator and one producer token on first start and keeps them in
``<data_dir>/tokens.json`` (mode 0600), where ``loader submit`` and the demo producer
find them.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from loader.config import Role, Settings, TokenConfig
from loader.errors import Forbidden, Unauthorized


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    tables: frozenset[str] | None

    def may_submit(self, table: str) -> bool:
        if self.role is Role.operator:
            return True
        return self.tables is None or table in self.tables


def tokens_file(settings: Settings) -> Path:
    return settings.data_dir / "tokens.json"


def generated_tokens(settings: Settings) -> list[TokenConfig]:
    """Read or create the generated tokens of an installation without configured ones."""
    path = tokens_file(settings)
    if path.exists():
        return [TokenConfig.model_validate(item) for item in json.loads(path.read_text(encoding="utf-8"))]
    tokens = [
        TokenConfig(token=secrets.token_urlsafe(24), role=Role.operator, name="operator"),
        TokenConfig(token=secrets.token_urlsafe(24), role=Role.producer, name="producer"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump([t.model_dump(mode="json") for t in tokens], handle, indent=1)
    return tokens


class Authenticator:
    def __init__(self, tokens: list[TokenConfig]) -> None:
        self._tokens = [
            (t.token.encode(), Principal(t.name, t.role, frozenset(t.tables) if t.tables is not None else None))
            for t in tokens
        ]

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(settings.auth_tokens or generated_tokens(settings))

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        presented = authorization[7:].strip().encode()
        found = None
        for token, principal in self._tokens:  # compare with every token: no timing hint
            if hmac.compare_digest(token, presented):
                found = principal
        if found is None:
            raise Unauthorized("invalid bearer token")
        return found

    @staticmethod
    def require_operator(principal: Principal) -> None:
        if principal.role is not Role.operator:
            raise Forbidden(f"{principal.name!r} is a {principal.role.value} token; this needs an operator token")

    @staticmethod
    def require_submit(principal: Principal, table: str) -> None:
        if not principal.may_submit(table):
            raise Forbidden(f"token {principal.name!r} may not submit to table {table!r}", table=table)
