from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.core.db import Base
from app.models._types import Timestamp, utcnow


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

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="researcher", passive_deletes=True)


class ApiToken(Base):
    """A bearer token, stored only as its SHA-256; the plain token is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    researcher_id: Mapped[int] = mapped_column(
        ForeignKey("researchers.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100), default="")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(Timestamp)
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp)

    researcher: Mapped[Researcher] = relationship(back_populates="tokens")


class WebSession(Base):
    """A browser signed in to the workspace. The cookie holds a random key (signed), the
    table its SHA-256; signing out deletes the row. A session opened with an API token
    ends when that token is revoked."""

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
