"""API tokens as the API takes and shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from app.auth.access import SCOPE_SUMMARIES
from app.core.fields import RequestModel, RowId
from app.models import TokenScope

MAX_TOKEN_PROJECTS = 1000

_SCOPES = "; ".join(f"{scope.value}: {summary}" for scope, summary in SCOPE_SUMMARIES.items())


class TokenCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", max_length=100, description="A note to tell tokens apart")
    scope: TokenScope = Field(strict=False, description=f"What the token may do ({_SCOPES})")
    projects: list[RowId] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TOKEN_PROJECTS,
        description="The ids of the projects it may touch; null: all of yours, later ones too",
    )
    expires_at: AwareDatetime | None = Field(
        default=None,
        strict=False,
        description="When it stops working (with a time zone, e.g. 2027-01-31T00:00:00Z); "
        "null: when revoked",
    )


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str = Field(description="How the token starts, to tell it apart")
    scope: TokenScope
    projects: list[int] | None = Field(description="null: every project of yours")
    expires_at: datetime | None
    status: Literal["live", "expired", "revoked"]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    made_by_token_id: int | None = Field(
        description="The token it was made with (directly, or in a browser it signed in); "
        "revoking that one revokes this one"
    )
    made_in_browser: bool = Field(
        description="Made in a workspace browser still signed in: signing out everywhere revokes it"
    )


class TokenCreated(TokenOut):
    token: str = Field(description="The token itself, shown this once (only its hash is kept)")
