"""Researcher accounts, API tokens and the workspace's browser sessions.

API tokens and session keys are random and stored only hashed (SHA-256: a 256-bit random
secret has nothing guessable to brute-force). Passwords are people's, so they are hashed
with Argon2 (pwdlib), slow on purpose.
"""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
from collections.abc import Collection
from datetime import UTC, date, datetime, time, timedelta
from typing import ClassVar

from pwdlib import PasswordHash
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from app.auth.access import Caller
from app.core.db import rows_changed
from app.core.errors import Forbidden, NotFound, ServiceError, Unprocessable
from app.models import ApiToken, Researcher, TokenScope, WebSession, api_token_projects
from app.models._types import utcnow
from app.projects.service import list_projects

TOKEN_PREFIX = "closer_"
LAST_USED_RESOLUTION = timedelta(minutes=5)
# A browser left signed in for longer than this without a visit signs in again.
SESSION_IDLE_LIMIT = timedelta(days=14)
MIN_PASSWORD_LENGTH = 10
# Argon2 hashes whatever it is given; a megabyte "password" would only cost us time.
MAX_PASSWORD_LENGTH = 1024
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_password_hash = PasswordHash.recommended()


@functools.cache
def _unknown_account_hash() -> str:
    """Checked against when the email is unknown, so a wrong address takes as long as a
    wrong password and the time does not tell which accounts exist. Made at the first
    sign-in, not at import: every process (web, worker, each CLI command) imports this
    module, and an Argon2 hash is ~0.13 s of a core."""
    return _password_hash.hash(secrets.token_urlsafe(16))


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


def researcher_named(*, session: Session, name: str) -> Researcher | None:
    return session.scalar(select(Researcher).where(Researcher.name == name))


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


def password_account(*, session: Session, email: str) -> int | None:
    """The researcher a password sent with this email is checked against: None where
    no account has this email and a password (there is nothing to check)."""
    return session.scalar(
        select(Researcher.id).where(
            Researcher.email == _signed_in_as(email), Researcher.password_hash.is_not(None)
        )
    )


def _signed_in_as(email: str) -> str:
    return email.strip().lower()[:254]


def check_stand_in() -> None:
    """A password check of a stand-in hash: what checking a password costs here."""
    _password_hash.verify_and_update(secrets.token_urlsafe(16), _unknown_account_hash())


def check_password(*, session: Session, email: str, password: str) -> Researcher | None:
    """The researcher this email and password sign in, or None (for any mismatch)."""
    if not password or len(password) > MAX_PASSWORD_LENGTH:
        return None
    researcher = session.scalar(select(Researcher).where(Researcher.email == _signed_in_as(email)))
    stored = researcher.password_hash if researcher is not None else None
    valid, new_hash = _password_hash.verify_and_update(password, stored or _unknown_account_hash())
    if not valid or researcher is None or stored is None:
        return None
    if new_hash is not None:  # hashed with older parameters than today's
        researcher.password_hash = new_hash
    return researcher


class Unauthenticated(ServiceError):
    """A bearer token that signs nobody in (unknown, revoked or expired)."""

    status_code = 401
    headers: ClassVar[dict[str, str]] = {"WWW-Authenticate": "Bearer"}


def issue_token(
    *,
    session: Session,
    researcher: Researcher,
    token_name: str = "",
    scope: TokenScope = TokenScope.admin,
    project_ids: Collection[int] | None = None,
    expires_at: datetime | None = None,
    maker: Caller | None = None,
) -> tuple[str, ApiToken]:
    """Add a token for the researcher and return it in plain (shown once) with its row.

    `project_ids` limits it to those of the researcher's projects (None: all of them,
    those made later too); `maker`, the caller making it through a token or a browser,
    is recorded (revoking that token, or signing out everywhere, revokes this one) and
    bounds it: a token never makes one that may do more, reach further or last longer."""
    projects = None if project_ids is None else frozenset(project_ids)
    if projects is not None:
        _check_reachable(session, researcher, projects)
    now = utcnow()
    if expires_at is not None:
        if expires_at.tzinfo is None:
            raise Unprocessable("expires_at: give a time zone (e.g. 2027-01-31T00:00:00Z)")
        if expires_at <= now:
            raise Unprocessable(f"expires_at: {_moment(expires_at)} has passed already")
    if maker is not None:
        if not maker.covers(scope, projects):
            reach = (
                "every project"
                if maker.all_projects
                else "projects " + _ids(maker.project_ids or ())
            )
            raise Forbidden(
                f"this token is '{maker.scope.value}' over {reach}: it cannot make a token "
                f"that may do more or reach further (asked: '{scope.value}' over "
                f"{'every project' if projects is None else 'projects ' + _ids(projects)})"
            )
        if maker.expires_at is not None and (expires_at is None or expires_at > maker.expires_at):
            raise Unprocessable(
                f"expires_at: the token making this one expires at {_moment(maker.expires_at)}; "
                "give an expiry no later than that"
            )
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        researcher_id=researcher.id,
        name=token_name,
        token_hash=hash_token(token),
        prefix=token[: len(TOKEN_PREFIX) + 6],
        scope=scope,
        all_projects=projects is None,
        expires_at=expires_at,
        made_by_token_id=maker.token.id if maker is not None and maker.token else None,
        made_in_session_id=maker.web_session_id if maker is not None else None,
    )
    session.add(row)
    session.flush()
    if projects:
        session.execute(
            insert(api_token_projects),
            [{"token_id": row.id, "project_id": project_id} for project_id in sorted(projects)],
        )
    return token, row


def _check_reachable(session: Session, researcher: Researcher, projects: frozenset[int]) -> None:
    if not projects:
        raise Unprocessable(
            "projects: name at least one project, or null for all of yours (now and later)"
        )
    theirs = list_projects(session=session, researcher=researcher, only=projects)
    missing = projects - {project.id for project in theirs}
    if missing:
        raise Unprocessable(f"projects: no project {_ids(missing)} of yours")


def _ids(ids: Collection[int]) -> str:
    return ", ".join(str(project_id) for project_id in sorted(ids))


def end_of_day(day: date) -> datetime:
    """The last second of `day`, UTC: a token that expires "on" a date works all of it."""
    return datetime.combine(day, time(23, 59, 59), tzinfo=UTC)


def _moment(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def create_token(
    *,
    session: Session,
    researcher_name: str,
    admin: bool = False,
    token_name: str = "",
    scope: TokenScope = TokenScope.admin,
    project_ids: Collection[int] | None = None,
    expires_at: datetime | None = None,
) -> str:
    """Create the researcher if new, add a token, and return the plain token (shown once)."""
    researcher = ensure_researcher(session=session, name=researcher_name, admin=admin)
    token, _ = issue_token(
        session=session,
        researcher=researcher,
        token_name=token_name,
        scope=scope,
        project_ids=project_ids,
        expires_at=expires_at,
    )
    return token


def token_projects(session: Session, tokens: Collection[ApiToken]) -> dict[int, frozenset[int]]:
    """The projects of each limited token among `tokens`, by token id."""
    limited = [token.id for token in tokens if not token.all_projects]
    found: dict[int, set[int]] = {token_id: set() for token_id in limited}
    if limited:
        for token_id, project_id in session.execute(
            select(api_token_projects.c.token_id, api_token_projects.c.project_id).where(
                api_token_projects.c.token_id.in_(limited)
            )
        ):
            found[token_id].add(project_id)
    return {token_id: frozenset(projects) for token_id, projects in found.items()}


def _token_caller(
    session: Session, token: ApiToken, researcher: Researcher, web_session_id: int | None = None
) -> Caller:
    projects = None if token.all_projects else token_projects(session, [token])[token.id]
    return Caller(
        researcher=researcher, token=token, project_ids=projects, web_session_id=web_session_id
    )


def _expired(token: ApiToken, now: datetime) -> bool:
    return token.expires_at is not None and token.expires_at <= now


def token_status(token: ApiToken, now: datetime) -> str:
    if token.revoked_at is not None:
        return "revoked"
    return "expired" if _expired(token, now) else "live"


def token_caller(*, session: Session, token: str) -> Caller:
    """Who a bearer token reaches, as what; Unauthenticated for a token that is unknown,
    revoked or expired. Notes when it was last used."""
    row = session.execute(
        select(ApiToken, Researcher)
        .join(Researcher, ApiToken.researcher_id == Researcher.id)
        .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    ).first()
    if row is None:
        raise Unauthenticated("invalid or revoked token")
    api_token, researcher = row
    now = utcnow()
    if api_token.expires_at is not None and _expired(api_token, now):
        raise Unauthenticated(f"this token expired at {_moment(api_token.expires_at)}")
    # Coarse on purpose: a write on every authenticated read would serialise SQLite.
    if api_token.last_used_at is None or now - api_token.last_used_at > LAST_USED_RESOLUTION:
        api_token.last_used_at = now
    return _token_caller(session, api_token, researcher)


def is_live_token(*, session: Session, token: str) -> bool:
    try:
        token_caller(session=session, token=token)
    except Unauthenticated:
        return False
    return True


def list_tokens(
    *, session: Session, caller: Caller
) -> list[tuple[ApiToken, frozenset[int] | None]]:
    """The researcher's tokens the caller reaches (a limited token: those over its
    projects only), newest first, revoked ones included (they say so), each with its
    projects (None: all)."""
    tokens = list(
        session.scalars(
            select(ApiToken)
            .where(ApiToken.researcher_id == caller.researcher.id)
            .order_by(ApiToken.id.desc())
        )
    )
    projects = token_projects(session, tokens)
    listed = [(token, projects.get(token.id)) for token in tokens]
    return [(token, reach) for token, reach in listed if caller.reaches_every(reach)]


def own_token(*, session: Session, caller: Caller, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None or token.researcher_id != caller.researcher.id:
        raise NotFound(f"no token {token_id}")
    if not caller.reaches_every(
        None if token.all_projects else token_projects(session, [token])[token.id]
    ):
        raise NotFound(f"no token {token_id}")
    return token


def revoke_token(*, session: Session, token: ApiToken) -> int:
    """Refuse the token from now on, and every token it made (with itself, or in a browser
    it signed in), theirs too; sign out the browsers any of them signed in. Returns how
    many tokens were revoked."""
    revoked, frontier = {token.id}, [token.id]
    while frontier:
        frontier = [
            made
            for made in session.scalars(
                select(ApiToken.id).where(ApiToken.made_by_token_id.in_(frontier))
            )
            if made not in revoked
        ]
        revoked.update(frontier)
    count = rows_changed(
        session.execute(
            update(ApiToken)
            .where(ApiToken.id.in_(revoked), ApiToken.revoked_at.is_(None))
            .values(revoked_at=utcnow())
            .execution_options(synchronize_session="fetch")
        )
    )
    session.execute(delete(WebSession).where(WebSession.api_token_id.in_(revoked)))
    session.flush()
    return count


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
    """Sign a browser in: the key its cookie carries (signed by the caller). A browser
    signed in with a token may do what the token may."""
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


def web_session_caller(*, session: Session, key: str) -> Caller | None:
    """Who the browser with this session key is, if the session is still open (signed
    in, not idle too long, and, if opened with a token, the token live)."""
    row = session.execute(
        select(WebSession, Researcher, ApiToken)
        .join(Researcher, WebSession.researcher_id == Researcher.id)
        .outerjoin(ApiToken, WebSession.api_token_id == ApiToken.id)
        .where(WebSession.key_hash == hash_token(key))
    ).first()
    if row is None:
        return None
    web_session, researcher, api_token = row
    now = utcnow()
    if now - web_session.last_seen_at > SESSION_IDLE_LIMIT:
        return None
    if api_token is not None and (api_token.revoked_at is not None or _expired(api_token, now)):
        return None
    if now - web_session.last_seen_at > LAST_USED_RESOLUTION:
        web_session.last_seen_at = now
    if api_token is None:
        return Caller(researcher=researcher, web_session_id=web_session.id)
    return _token_caller(session, api_token, researcher, web_session_id=web_session.id)


def close_web_session(*, session: Session, key: str) -> None:
    session.execute(delete(WebSession).where(WebSession.key_hash == hash_token(key)))


def count_web_sessions(*, session: Session, researcher: Researcher) -> int:
    return (
        session.scalar(select(func.count()).where(WebSession.researcher_id == researcher.id)) or 0
    )


def _made_in_browsers(researcher: Researcher):
    """The live tokens made in the researcher's browsers signed in now."""
    return (
        select(ApiToken)
        .join(WebSession, ApiToken.made_in_session_id == WebSession.id)
        .where(WebSession.researcher_id == researcher.id, ApiToken.revoked_at.is_(None))
    )


def tokens_made_in_browsers(*, session: Session, researcher: Researcher) -> int:
    """How many live tokens were made in the browsers signed in now (signing out
    everywhere revokes them)."""
    made = _made_in_browsers(researcher).subquery()
    return session.scalar(select(func.count()).select_from(made)) or 0


def sign_out_everywhere(*, session: Session, researcher: Researcher) -> tuple[int, int]:
    """End every browser session of the researcher, and revoke the tokens made in them
    (a browser someone else signed in to may have made one to stay in): how many
    sessions there were, and how many tokens went with them."""
    made_in_them = list(session.scalars(_made_in_browsers(researcher)))
    revoked = sum(revoke_token(session=session, token=token) for token in made_in_them)
    ended = rows_changed(
        session.execute(delete(WebSession).where(WebSession.researcher_id == researcher.id))
    )
    return ended, revoked


def use_sign_in_link(*, session: Session, researcher: Researcher, made_at: int) -> bool:
    """Mark a sign-in link made at `made_at` used; False if it (or a later one) was used
    already. One conditional update: of two browsers opening it at once, one gets in."""
    used = rows_changed(
        session.execute(
            update(Researcher)
            .where(
                Researcher.id == researcher.id,
                (Researcher.sign_in_link_used_through.is_(None))
                | (Researcher.sign_in_link_used_through < made_at),
            )
            .values(sign_in_link_used_through=made_at)
        )
    )
    return used == 1
