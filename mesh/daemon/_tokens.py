"""The daemon's token store: client and agent tokens, kept hashed in the data directory.

Layout under the data directory (every file mode 0600)::

    tokens.json     every token the daemon issued: id, name, role, agent, SHA-256 digest
    tokens.journal  what changed since tokens.json was written: one JSON line per change
    admin.token     the admin token written on first start (plain text, for local tools)

Issuing or revoking a token appends one line to the journal (and fsyncs it);
``tokens.json`` is rewritten only when the journal has grown as long as the
store, so issuing N tokens writes O(N) bytes, not O(N²). Loading replays the
journal over ``tokens.json``; replaying a change twice changes nothing, so a
crash between the two writes of a compaction loses nothing, and a torn last line
(a crash mid-append) is dropped. At most ``max_tokens`` tokens exist at once.

A token is ``mesh_`` plus 32 random bytes (URL-safe base64): guessing is hopeless,
so one SHA-256 is enough and no slow KDF is needed. Only digests are stored.
A presented token is looked up by its digest and the stored digest is then
compared with :func:`hmac.compare_digest`, so no timing depends on a stored
secret. Tokens are never logged; ids and names are not secrets.

The daemon is the only writer of ``tokens.json`` (``mesh token`` goes through
its admin routes), so a change is live at once and no file is watched.
:func:`find_token` is how clients (the CLI, :mod:`mesh.testing`, the demo) find
a token with nothing handled by hand: ``$MESH_TOKEN``, else the admin token file.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path
from typing import Final

import msgspec

from mesh._errors import MeshError
from mesh._input import ADMIN_TOKEN_FILE, find_token
from mesh._logging import get_logger

__all__ = [
    "ADMIN_TOKEN_FILE",
    "TOKENS_FILE",
    "Role",
    "TokenEntry",
    "TokenError",
    "TokenNameTaken",
    "TokenStore",
    "find_token",
    "token_digest",
]

log = get_logger("mesh.daemon")

TOKENS_FILE: Final = "tokens.json"
JOURNAL_FILE: Final = "tokens.journal"
#: The journal is folded into tokens.json once it has this many lines, or as many as tokens.
_COMPACT_AT_LEAST: Final = 64
_PREFIX: Final = "mesh_"
_NAME_LIMIT: Final = 64


class Role(enum.StrEnum):
    """What a token may do; see ``docs/security.md`` for the rights of each."""

    ADMIN = "admin"  # everything, tokens included
    CLIENT = "client"  # call, broadcast, register agents, run its own rooms, observe
    OBSERVER = "observer"  # read and watch only
    AGENT = "agent"  # dial in on /ws as one agent id


class TokenError(MeshError):
    """A token request that cannot be done (unknown id, bad role or name)."""


class TooManyTokens(TokenError):
    """The store holds ``max_tokens`` tokens already."""


class TokenNameTaken(TokenError):
    """A live token has this name already: ``[access]`` rules and revocation go by name."""


class _Change(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of the journal: a token issued, or tokens revoked (by id)."""

    add: TokenEntry | None = None
    revoke: list[str] = []


class TokenEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One issued token, as stored: never the token itself."""

    id: str
    name: str
    role: Role
    digest: str
    #: For ``agent`` tokens: the one agent id it may dial in as.
    agent: str | None = None
    created_at: int = 0  # epoch seconds

    def shown(self) -> dict[str, object]:
        """The entry as the API lists it (no digest)."""
        return {
            "id": self.id,
            "name": self.name,
            "role": str(self.role),
            "agent": self.agent,
            "created_at": self.created_at,
        }


class _TokenFile(msgspec.Struct, kw_only=True):
    tokens: list[TokenEntry] = []


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, readable by the owner only (0600)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


class TokenStore:
    """Every token the daemon issued, by digest; see the module docstring."""

    def __init__(self, data_dir: str | os.PathLike[str], *, max_tokens: int = 10_000) -> None:
        self.directory = Path(data_dir)
        self.path = self.directory / TOKENS_FILE
        self.journal = self.directory / JOURNAL_FILE
        self.admin_path = self.directory / ADMIN_TOKEN_FILE
        self.max_tokens = max_tokens
        self._by_digest: dict[str, TokenEntry] = {}
        self._journaled = 0  # lines in the journal

    def load(self) -> None:
        """Read ``tokens.json`` and its journal, if there are; a broken file stops the
        daemon, saying why."""
        self._load_snapshot()
        self._replay()

    def _load_snapshot(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise TokenError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            stored = msgspec.json.decode(data, type=_TokenFile)
        except msgspec.DecodeError as exc:
            raise TokenError(f"{self.path}: {exc}") from None
        self._by_digest = {entry.digest: entry for entry in stored.tokens}
        if self.path.stat().st_mode & 0o077:
            log.warning("daemon.tokens_file_readable", path=str(self.path), want="0600")

    def _replay(self) -> None:
        """Apply the journal's changes over tokens.json (each is idempotent)."""
        try:
            lines = self.journal.read_bytes().splitlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise TokenError(f"cannot read {self.journal}: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            try:
                change = msgspec.json.decode(line, type=_Change)
            except msgspec.DecodeError as exc:
                if number == len(lines):
                    log.warning("daemon.tokens_journal_torn", path=str(self.journal))
                    break  # a crash mid-append: that change was never answered
                raise TokenError(f"{self.journal}, line {number}: {exc}") from None
            self._apply(change)
        self._journaled = len(lines)

    def _apply(self, change: _Change) -> None:
        if change.add is not None:
            self._by_digest[change.add.digest] = change.add
        if change.revoke:
            gone = set(change.revoke)
            for digest in [d for d, e in self._by_digest.items() if e.id in gone]:
                del self._by_digest[digest]

    def ensure_admin(self) -> Path | None:
        """First start: with no client tokens at all, create an admin token and write it
        to ``admin.token`` (0600). Returns the file's path when one exists, else None."""
        if not any(e.role is not Role.AGENT for e in self._by_digest.values()):
            taken = {entry.name for entry in self._by_digest.values()}
            name = "admin" if "admin" not in taken else f"admin-{secrets.token_hex(4)}"
            _, token = self.create(Role.ADMIN, name)
            _write_private(self.admin_path, token.encode() + b"\n")
            log.info("daemon.admin_token_created", path=str(self.admin_path))
        return self.admin_path if self.admin_path.exists() else None

    def identify(self, token: str) -> TokenEntry | None:
        """The entry ``token`` belongs to, or None."""
        digest = token_digest(token)
        entry = self._by_digest.get(digest)
        if entry is None or not hmac.compare_digest(entry.digest, digest):
            return None
        return entry

    def create(self, role: Role, name: str, *, agent: str | None = None) -> tuple[TokenEntry, str]:
        """Issue a token; returns its entry and the token (shown once, never stored)."""
        if not name or len(name) > _NAME_LIMIT or not name.isprintable():
            raise TokenError(f"a token name is 1-{_NAME_LIMIT} printable characters")
        if (role is Role.AGENT) != (agent is not None):
            raise TokenError("an agent token names its agent id, and only an agent token does")
        self._check_name_free(name)
        if len(self._by_digest) >= self.max_tokens:
            raise TooManyTokens(
                f"the daemon holds {self.max_tokens} tokens (max_tokens): revoke some first"
            )
        token = _PREFIX + secrets.token_urlsafe(32)
        taken = {entry.id for entry in self._by_digest.values()}
        # Short ids are read and typed by people; each must still name one token, since
        # revoking by id revokes every token that has it and rooms are owned by it.
        token_id = secrets.token_hex(4)
        while token_id in taken:  # at most max_tokens of 2**32 are taken: rarely twice
            token_id = secrets.token_hex(4)
        entry = TokenEntry(
            id=token_id,
            name=name,
            role=role,
            digest=token_digest(token),
            agent=agent,
            created_at=int(time.time()),
        )
        self._by_digest[entry.digest] = entry
        self._record(_Change(add=entry))
        log.info("daemon.token_created", id=entry.id, name=name, role=str(role))
        return entry, token

    def _check_name_free(self, name: str) -> None:
        """Names are unique among live tokens: an ``[access]`` rule and ``mesh token revoke
        NAME`` mean one token, so a provisioning script run twice cannot widen a rule."""
        taken = next((e for e in self._by_digest.values() if e.name == name), None)
        if taken is not None:
            raise TokenNameTaken(
                f"a token named {name!r} exists (id {taken.id}): token names are unique; "
                "pick another, or revoke that one first"
            )

    def revoke(self, id_or_name: str) -> list[TokenEntry]:
        """Forget every token with this id (or, failing that, this name); returns them."""
        doomed = [e for e in self._by_digest.values() if e.id == id_or_name]
        doomed = doomed or [e for e in self._by_digest.values() if e.name == id_or_name]
        if not doomed:
            raise TokenError(f"no token with id or name {id_or_name!r}")
        for entry in doomed:
            del self._by_digest[entry.digest]
        self._record(_Change(revoke=[entry.id for entry in doomed]))
        for entry in doomed:
            log.info("daemon.token_revoked", id=entry.id, name=entry.name)
        return doomed

    def names_agent(self, agent_id: str) -> bool:
        """Whether a live agent token is issued for ``agent_id`` (the id is kept for it)."""
        return any(entry.agent == agent_id for entry in self._by_digest.values())

    def entries(self) -> list[TokenEntry]:
        return sorted(self._by_digest.values(), key=lambda e: (e.created_at, e.id))

    def _record(self, change: _Change) -> None:
        """Append one change to the journal; fold the journal into tokens.json when it has
        grown as long as the store (so each token is written O(1) times on average)."""
        full = self._journaled >= max(_COMPACT_AT_LEAST, len(self._by_digest))
        if full or not self.path.exists():
            self._save()
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as file:
            file.write(msgspec.json.encode(change) + b"\n")
            file.flush()
            os.fsync(file.fileno())
        self._journaled += 1

    def _save(self) -> None:
        """Write every token to tokens.json, then empty the journal it now contains."""
        self.directory.mkdir(parents=True, exist_ok=True)
        data = msgspec.json.encode(_TokenFile(tokens=self.entries()))
        _write_private(self.path, data)
        self.journal.unlink(missing_ok=True)
        self._journaled = 0
