"""Bearer-token authentication with two roles.

When the configuration names no tokens the service does not run open: it generates
one operator and one producer token on first start and keeps them in
``<data_dir>/tokens.json`` (mode 0600), where ``loader submit`` and the demo producer
find them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from loader.config import Role, Settings, TokenConfig
from loader.core.durable_files import fsync_directory
from loader.core.errors import Forbidden, Unauthorized

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    tables: frozenset[str] | None

    def may_submit(self, table: str) -> bool:
        """A producer token limited to some tables submits to, and sees, only those."""
        if self.role is Role.operator:
            return True
        return self.tables is None or table in self.tables

    may_read = may_submit


def tokens_file(settings: Settings) -> Path:
    return settings.data_dir / "tokens.json"


def _read_tokens(path: Path) -> list[TokenConfig]:
    if path.stat().st_mode & 0o077:
        log.warning("%s is readable by other users; `chmod 600 %s`", path, path)
    return [TokenConfig.model_validate(item) for item in json.loads(path.read_text(encoding="utf-8"))]


def generated_tokens(settings: Settings) -> list[TokenConfig]:
    """Read or create the generated tokens of an installation without configured ones.

    The file is written whole under a temporary name (mode 0600 whatever the umask),
    fsynced and then linked into place: a crash never leaves a half-written file that
    would stop the next start, and of two services starting at once one wins and the
    other reads its tokens.
    """
    path = tokens_file(settings)
    if path.exists():
        return _read_tokens(path)
    tokens = [
        TokenConfig(token=secrets.token_urlsafe(24), role=Role.operator, name="operator"),
        TokenConfig(token=secrets.token_urlsafe(24), role=Role.producer, name="producer"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)  # os.open's mode is narrowed by the umask, never widened
            json.dump([t.model_dump(mode="json") for t in tokens], handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process generated them first: use theirs
            return _read_tokens(path)
        fsync_directory(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Authenticator:
    """Finds the principal of a bearer token without telling anything about the tokens by timing.

    Tokens are kept and compared as SHA-256 digests: ``hmac.compare_digest`` is constant
    time only for inputs of equal length, and digests are all 32 bytes, so neither the
    content nor the length of a configured token shows. Every configured token is
    compared (no early exit), so the time does not depend on which one matched either.
    Tokens are never logged and never put into an error message.
    """

    def __init__(self, tokens: list[TokenConfig]) -> None:
        self._tokens = [
            (_digest(t.token), Principal(t.name, t.role, frozenset(t.tables) if t.tables is not None else None))
            for t in tokens
        ]

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(settings.auth_tokens or generated_tokens(settings))

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization or authorization[:7].lower() != "bearer ":
            raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        presented = _digest(authorization[7:].strip())
        found = None
        for digest, principal in self._tokens:  # every token, even after a match
            if hmac.compare_digest(digest, presented):
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
            raise Forbidden(
                f"token {principal.name!r} may not submit to table {table!r}; use a token for that table "
                "(auth_tokens[].tables) or an unrestricted producer token",
                table=table,
            )

    @staticmethod
    def require_read(principal: Principal, table: str) -> None:
        if not principal.may_read(table):
            raise Forbidden(
                f"token {principal.name!r} may not see table {table!r}; "
                f"it is limited to {sorted(principal.tables or ())}",
                table=table,
            )
