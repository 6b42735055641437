"""Researchers who share a project: made with a password and a token, and joined by an
invitation the owner makes, as a lab's colleagues are."""

from __future__ import annotations

from app.auth.service import create_token, set_researcher_password
from app.core.db import unit_of_work

API = "/api/v1"


def colleague(app, email: str, name: str, scope: str = "admin") -> dict[str, str]:
    """A researcher who signs in as `email`, and a bearer header of a token of theirs."""
    with unit_of_work(app.state.session_factory) as session:
        set_researcher_password(
            session=session, email=email, password="a long enough password", name=name
        )
        token = create_token(session=session, researcher_name=name, scope=scope)
    return {"Authorization": f"Bearer {token}"}


def invite(client, auth, pid: int, email: str, role: str):
    return client.post(
        f"{API}/projects/{pid}/invitations", json={"email": email, "role": role}, headers=auth
    )


def secret_of(link: str) -> str:
    return link.rsplit("/", 1)[-1]


def joined(client, app, auth, pid: int, name: str, role: str) -> tuple[dict[str, str], int]:
    """`name` (name@lab.example) invited to the project in `role` and joined by the link:
    their bearer header (a token of their whole account's power) and researcher id."""
    email = f"{name}@lab.example"
    bearer = colleague(app, email, name)
    invited = invite(client, auth, pid, email, role)
    assert invited.status_code == 201, invited.text
    accepted = client.post(
        f"{API}/invitations/{secret_of(invited.json()['link'])}/accept", headers=bearer
    )
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["role"] == role
    members = client.get(f"{API}/projects/{pid}/members", headers=auth).json()
    (member,) = [member for member in members if member["name"] == name]
    return bearer, member["researcher_id"]
