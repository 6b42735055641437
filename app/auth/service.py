"""Researcher accounts, API tokens and the workspace's browser sessions.

API tokens and session keys are random and stored only hashed (SHA-256: a 256-bit random
secret has nothing guessable to brute-force). Passwords are people's, so they are hashed
with Argon2 (pwdlib), slow on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import secrets
from datetime import timedelta

from pwdlib import PasswordHash
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.core.errors import NotFound, ServiceError
from app.models import ApiToken, Researcher, WebSession
from app.models._types import utcnow

TOKEN_PREFIX = "closer_"
LAST_USED_RESOLUTION = timedelta(minutes=5)
# A browser left signed in for longer than this without a visit signs in again.
SESSION_IDLE_LIMIT = timedelta(days=14)
MIN_PASSWORD_LENGTH = 10
# Argon2 hashes whatever it is given; a megabyte "password" would only cost us time.
MAX_PASSWORD_LENGTH = 1024
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_password_hash = PasswordHash.recommended()
# Checked against when the email is unknown, so a wrong address takes as long as a
# wrong password and the time does not tell which accounts exist.
_UNKNOWN_ACCOUNT_HASH = _password_hash.hash(secrets.token_urlsafe(16))


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def ensure_researcher(*, session: Session, name: str, admin: bool = False) -> Researcher:
    """The researcher called `name`, created if new; `admin` grants (never revokes) admin."""
    researcher = session.scalar(select(Researcher).where(Researcher.name == name))
    if researcher is None:
        researcher = Researcher(name=name, is_admin=admin)
        session.add(researcher)
        session.flush()
    elif admin:
        researcher.is_admin = True
    return researcher


def normalise_email(email: str) -> str:
    email = email.strip().lower()
    if len(email) > 254 or not _EMAIL.match(email):
        raise ServiceError(f"'{email[:60]}' is not an email address")
    return email


def check_password_rules(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ServiceError(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ServiceError(f"a password may have at most {MAX_PASSWORD_LENGTH} characters")


def set_researcher_password(
    *, session: Session, email: str, password: str, name: str | None = None, admin: bool = False
) -> tuple[Researcher, bool]:
    """The researcher with this email, created if new (named `name`, else the address),
    with `password` as their password from now on; and whether they were created."""
    email = normalise_email(email)
    check_password_rules(password)
    researcher = session.scalar(select(Researcher).where(Researcher.email == email))
    created = researcher is None
    if researcher is None:
        if name is not None:
            researcher = session.scalar(select(Researcher).where(Researcher.name == name))
        if researcher is None:
            researcher = Researcher(name=name or email, is_admin=admin)
            session.add(researcher)
        elif researcher.email is not None:
            raise ServiceError(f"researcher '{name}' already signs in as {researcher.email}")
        researcher.email = email
    if admin:
        researcher.is_admin = True
    changed = researcher.password_hash is not None
    researcher.password_hash = _password_hash.hash(password)
    session.flush()
    if changed:  # whoever signed in with the old one is signed out
        sign_out_everywhere(session=session, researcher=researcher)
    return researcher, created


def check_password(*, session: Session, email: str, password: str) -> Researcher | None:
    """The researcher this email and password sign in, or None (for any mismatch)."""
    if not password or len(password) > MAX_PASSWORD_LENGTH:
        return None
    researcher = session.scalar(
        select(Researcher).where(Researcher.email == email.strip().lower()[:254])
    )
    stored = researcher.password_hash if researcher is not None else None
    valid, new_hash = _password_hash.verify_and_update(password, stored or _UNKNOWN_ACCOUNT_HASH)
    if not valid or researcher is None or stored is None:
        return None
    if new_hash is not None:  # hashed with older parameters than today's
        researcher.password_hash = new_hash
    return researcher


def issue_token(*, session: Session, researcher: Researcher, token_name: str = "") -> str:
    """Add a token for the researcher and return it in plain (shown once)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(
            researcher_id=researcher.id,
            name=token_name,
            token_hash=hash_token(token),
            prefix=token[: len(TOKEN_PREFIX) + 6],
        )
    )
    session.flush()
    return token


def create_token(
    *, session: Session, researcher_name: str, admin: bool = False, token_name: str = ""
) -> str:
    """Create the researcher if new, add a token, and return the plain token (shown once)."""
    researcher = ensure_researcher(session=session, name=researcher_name, admin=admin)
    return issue_token(session=session, researcher=researcher, token_name=token_name)


def find_live_token(*, session: Session, token: str) -> tuple[ApiToken, Researcher] | None:
    """The unrevoked token and its researcher, or None; notes when it was last used."""
    row = session.execute(
        select(ApiToken, Researcher)
        .join(Researcher, ApiToken.researcher_id == Researcher.id)
        .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    api_token, researcher = row
    now = utcnow()
    # Coarse on purpose: a write on every authenticated read would serialise SQLite.
    if api_token.last_used_at is None or now - api_token.last_used_at > LAST_USED_RESOLUTION:
        api_token.last_used_at = now
    return api_token, researcher


def authenticate(*, session: Session, token: str) -> Researcher | None:
    """The researcher a live token belongs to, or None."""
    found = find_live_token(session=session, token=token)
    return None if found is None else found[1]


def list_tokens(*, session: Session, researcher: Researcher) -> list[ApiToken]:
    """The researcher's tokens, newest first, revoked ones included (they say so)."""
    return list(
        session.scalars(
            select(ApiToken)
            .where(ApiToken.researcher_id == researcher.id)
            .order_by(ApiToken.id.desc())
        )
    )


def revoke_token(*, session: Session, token: ApiToken) -> None:
    """Refuse the token from now on, and sign out the browsers it signed in."""
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    session.execute(delete(WebSession).where(WebSession.api_token_id == token.id))
    session.flush()


def own_token(*, session: Session, researcher: Researcher, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None or token.researcher_id != researcher.id:
        raise NotFound(f"no token {token_id}")
    return token


def tokens_by_prefix(*, session: Session, prefix: str) -> list[ApiToken]:
    """Tokens whose plain text starts with `prefix` (what the tokens page lists, or the
    whole token), for revoking one from the command line."""
    prefix = prefix.strip()
    if prefix.startswith(TOKEN_PREFIX) and len(prefix) > len(TOKEN_PREFIX) + 6:
        found = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(prefix)))
        return [found] if found is not None else []
    return list(session.scalars(select(ApiToken).where(ApiToken.prefix == prefix)))


def open_web_session(
    *, session: Session, researcher: Researcher, api_token: ApiToken | None = None
) -> str:
    """Sign a browser in: the key its cookie carries (signed by the caller)."""
    key = secrets.token_urlsafe(32)
    session.add(
        WebSession(
            key_hash=hash_token(key),
            researcher_id=researcher.id,
            api_token_id=api_token.id if api_token is not None else None,
        )
    )
    session.flush()
    return key


def web_session_researcher(*, session: Session, key: str) -> Researcher | None:
    """Who the browser with this session key is, if the session is still open (signed
    in, not idle too long, and, if opened with a token, the token not revoked)."""
    row = session.execute(
        select(WebSession, Researcher, ApiToken.revoked_at)
        .join(Researcher, WebSession.researcher_id == Researcher.id)
        .outerjoin(ApiToken, WebSession.api_token_id == ApiToken.id)
        .where(WebSession.key_hash == hash_token(key))
    ).first()
    if row is None:
        return None
    web_session, researcher, token_revoked_at = row
    now = utcnow()
    if token_revoked_at is not None or now - web_session.last_seen_at > SESSION_IDLE_LIMIT:
        return None
    if now - web_session.last_seen_at > LAST_USED_RESOLUTION:
        web_session.last_seen_at = now
    return researcher


def close_web_session(*, session: Session, key: str) -> None:
    session.execute(delete(WebSession).where(WebSession.key_hash == hash_token(key)))


def count_web_sessions(*, session: Session, researcher: Researcher) -> int:
    return (
        session.scalar(select(func.count()).where(WebSession.researcher_id == researcher.id)) or 0
    )


def sign_out_everywhere(*, session: Session, researcher: Researcher) -> int:
    """End every browser session of the researcher; returns how many there were."""
    return session.execute(
        delete(WebSession).where(WebSession.researcher_id == researcher.id)
    ).rowcount


def use_sign_in_link(*, session: Session, researcher: Researcher, made_at: int) -> bool:
    """Mark a sign-in link made at `made_at` used; False if it (or a later one) was used
    already. One conditional update: of two browsers opening it at once, one gets in."""
    used = session.execute(
        update(Researcher)
        .where(
            Researcher.id == researcher.id,
            (Researcher.sign_in_link_used_through.is_(None))
            | (Researcher.sign_in_link_used_through < made_at),
        )
        .values(sign_in_link_used_through=made_at)
    ).rowcount
    return used == 1


class SignInsBusy(ServiceError):
    status_code = 503

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            "Many sign-ins are being checked at this moment: try again in a few seconds."
        )
        self.headers = {"Retry-After": str(retry_after)}


class PasswordChecks:
    """How many passwords a web process checks at once. Each check (Argon2id) takes 64
    MiB, and an unknown email is checked against a stand-in hash so that timing tells
    nothing; unbounded, a burst of anonymous attempts takes gigabytes. Beyond the bound
    an attempt waits a moment, then is told to retry, whatever the email."""

    def __init__(self, at_once: int, wait_seconds: float = 2.0) -> None:
        self.at_once, self.wait_seconds = at_once, wait_seconds
        self._semaphore: asyncio.Semaphore | None = None

    @contextlib.asynccontextmanager
    async def slot(self):
        if self._semaphore is None:  # made in the running loop
            self._semaphore = asyncio.Semaphore(self.at_once)
        try:
            await asyncio.wait_for(self._semaphore.acquire(), self.wait_seconds)
        except TimeoutError:
            raise SignInsBusy(retry_after=2) from None
        try:
            yield
        finally:
            self._semaphore.release()
