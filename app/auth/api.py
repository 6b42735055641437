"""API tokens over REST: make one for a script or a client, list them, revoke one. Only
a token whose scope is 'admin' (or a browser signed in with a password) manages tokens,
and the tokens it makes never do more, reach further or last longer than it."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy.orm import Session

from app.auth import service as auth
from app.auth.access import Caller
from app.auth.deps import ManagingAccount
from app.auth.schemas import TokenCreate, TokenCreated, TokenOut
from app.core.deps import SessionDep
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.models import ApiToken
from app.models._types import utcnow

router = APIRouter(prefix="/tokens", tags=["tokens"], route_class=StrictJSONRoute)


def token_out(token: ApiToken, projects: frozenset[int] | None) -> TokenOut:
    return TokenOut(
        id=token.id,
        name=token.name,
        prefix=token.prefix,
        scope=token.scope,
        projects=None if projects is None else sorted(projects),
        expires_at=token.expires_at,
        status=auth.token_status(token, utcnow()),
        created_at=token.created_at,
        last_used_at=token.last_used_at,
        revoked_at=token.revoked_at,
        made_by_token_id=token.made_by_token_id,
        made_in_browser=token.made_in_session_id is not None,
    )


def issue_requested(session: Session, caller: Caller, body: TokenCreate) -> tuple[str, ApiToken]:
    """The token `body` asks for, made by `caller` (the API's and the tokens page's)."""
    return auth.issue_token(
        session=session,
        researcher=caller.researcher,
        token_name=body.name.strip(),
        scope=body.scope,
        project_ids=body.projects,
        expires_at=body.expires_at,
        maker=caller,
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
def create_token(
    body: TokenCreate, session: SessionDep, caller: ManagingAccount, response: Response
):
    """A new token, shown this once. It records the token (or browser) that made it:
    revoking that one revokes this one too."""
    plain, token = issue_requested(session, caller, body)
    response.headers["Cache-Control"] = "no-store"
    projects = None if body.projects is None else frozenset(body.projects)
    return TokenCreated(**token_out(token, projects).model_dump(), token=plain)


@router.get("", response_model=list[TokenOut])
def list_tokens(session: SessionDep, caller: ManagingAccount):
    """Your tokens, newest first, revoked and expired ones too (a token limited to some
    projects sees the tokens over those only)."""
    return [
        token_out(token, projects)
        for token, projects in auth.list_tokens(session=session, caller=caller)
    ]


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(token_id: RowId, session: SessionDep, caller: ManagingAccount) -> Response:
    """Refuse the token from now on, with every token it made and every browser it
    signed in. Revoking a revoked token changes nothing."""
    token = auth.own_token(session=session, caller=caller, token_id=token_id)
    auth.revoke_token(session=session, token=token)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
