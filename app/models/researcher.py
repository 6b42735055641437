from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Column, ForeignKey, String, Table
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.core.db import Base
from app.models._types import Timestamp, string_enum, utcnow


class Researcher(Base):
    """Owns projects; signs in to the workspace with an email and password (or a token)
    and calls the API with tokens. Admins see every project."""

    __tablename__ = "researchers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # Stored lower-case: an address is one account however it is typed.
    email: Mapped[str | None] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    is_admin: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # A sign-in link signs in once: the newest used link's making time (Unix seconds);
    # a link made then or before is refused.
    sign_in_link_used_through: Mapped[int | None] = mapped_column(BigInteger)

    tokens: Mapped[list[ApiToken]] = relationship(
        back_populates="researcher", passive_deletes=True, foreign_keys="ApiToken.researcher_id"
    )


class TokenScope(StrEnum):
    """What a token may do, each scope holding the one before it (app/auth/access.py
    spells out which actions each allows)."""

    predict = "predict"
    read = "read"
    write = "write"
    admin = "admin"


# The projects a token is limited to, when it is (`ApiToken.all_projects` false). A
# project's deletion takes its rows with it: a token left with none reaches nothing.
api_token_projects = Table(
    "api_token_projects",
    Base.metadata,
    Column("token_id", ForeignKey("api_tokens.id", ondelete="CASCADE"), primary_key=True),
    Column(
        "project_id", ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True, index=True
    ),
)


class ApiToken(Base):
    """A bearer token, stored only as its SHA-256; the plain token is shown once. It may
    do what its scope allows in its projects (all of its researcher's, or those listed)
    until it expires or is revoked. A token made with another token, or in a browser
    session, records which: revoking the maker, or signing out everywhere, revokes it."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    researcher_id: Mapped[int] = mapped_column(
        ForeignKey("researchers.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100), default="")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    scope: Mapped[TokenScope] = mapped_column(string_enum(TokenScope, "token_scope"))
    all_projects: Mapped[bool] = mapped_column(default=True)
    expires_at: Mapped[datetime | None] = mapped_column(Timestamp)
    made_by_token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="SET NULL"), index=True
    )
    made_in_session_id: Mapped[int | None] = mapped_column(
        # use_alter: sessions point at tokens too, and the cycle needs one side named.
        ForeignKey("web_sessions.id", ondelete="SET NULL", use_alter=True),
        index=True,
    )
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(Timestamp)
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp)

    researcher: Mapped[Researcher] = relationship(
        back_populates="tokens", foreign_keys=[researcher_id]
    )


class WebSession(Base):
    """A browser signed in to the workspace. The cookie holds a random key (signed), the
    table its SHA-256; signing out deletes the row. A session opened with an API token
    can do what the token can, and ends when that token is revoked or expires."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    researcher_id: Mapped[int] = mapped_column(
        ForeignKey("researchers.id", ondelete="CASCADE"), index=True
    )
    api_token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
