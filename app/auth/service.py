"""Researcher accounts and bearer tokens. Tokens are random and stored only hashed."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import ApiToken, Researcher
from app.models._types import utcnow

TOKEN_PREFIX = "closer_"
LAST_USED_RESOLUTION = timedelta(minutes=5)


def hash_token(token: str) -> str:
    # A 256-bit random token needs no slow hash: nothing guessable to brute-force.
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


def create_token(
    *, session: Session, researcher_name: str, admin: bool = False, token_name: str = ""
) -> str:
    """Create the researcher if new, add a token, and return the plain token (shown once)."""
    researcher = ensure_researcher(session=session, name=researcher_name, admin=admin)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(
            researcher_id=researcher.id,
            name=token_name,
            token_hash=hash_token(token),
            prefix=token[: len(TOKEN_PREFIX) + 6],
        )
    )
    return token


def authenticate(*, session: Session, token: str) -> Researcher | None:
    """The researcher a live token belongs to, or None."""
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
    return researcher
