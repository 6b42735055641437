"""A project shared by a lab (issue 55): the owner invites by a single-use link, each
member may do what their role allows and nothing more (through a token, what its scope
allows too), and the owner changes roles, removes members and hands the project over.
Bad input is refused, naming what is wrong, and changes nothing."""

from __future__ import annotations

import io
import re
import socket
from datetime import timedelta

import pyarrow.parquet as pq
from sqlalchemy import update

from app.auth.service import create_token
from app.core.db import unit_of_work
from app.models import ProjectInvitation
from app.models._types import utcnow
from tests.support.members import colleague, invite, joined, secret_of
from tests.support.uploads import upload

API = "/api/v1"


def test_each_role_may_do_what_it_is_for_and_no_more(app, client, auth, project):
    pid = project["id"]
    viewer, vera_id = joined(client, app, auth, pid, "vera", "viewer")
    editor, _ = joined(client, app, auth, pid, "ed", "editor")

    # Both see the project in their list, and who shares it.
    for bearer in (viewer, editor):
        assert [p["id"] for p in client.get(f"{API}/projects", headers=bearer).json()] == [pid]
    listed = client.get(f"{API}/projects/{pid}/members", headers=viewer).json()
    assert [(m["name"], m["role"]) for m in listed] == [
        ("alice", "owner"),
        ("vera", "viewer"),
        ("ed", "editor"),
    ]

    # A viewer reads and exports, and changes nothing.
    assert client.get(f"{API}/projects/{pid}", headers=viewer).status_code == 200
    assert client.get(f"{API}/projects/{pid}/triplets/export", headers=viewer).status_code == 200
    renamed = client.patch(f"{API}/projects/{pid}", json={"name": "mine"}, headers=viewer)
    assert renamed.status_code == 403
    assert "your role in this project is 'viewer'" in renamed.json()["detail"]
    assert "needs the role 'editor'" in renamed.json()["detail"]
    # ... and sees no participant's id until the owner allows it.
    hidden = client.get(f"{API}/projects/{pid}/participants", headers=viewer)
    assert hidden.status_code == 403 and "the owner can allow you" in hidden.json()["detail"]
    allowed = client.patch(
        f"{API}/projects/{pid}/members/{vera_id}", json={"sees_participants": True}, headers=auth
    )
    assert allowed.status_code == 200, allowed.text
    assert client.get(f"{API}/projects/{pid}/participants", headers=viewer).status_code == 200

    # An editor changes the project, but neither deletes it nor manages its members.
    renamed = client.patch(f"{API}/projects/{pid}", json={"name": "lab study"}, headers=editor)
    assert renamed.status_code == 200, renamed.text
    assert client.get(f"{API}/projects/{pid}/participants", headers=editor).status_code == 200
    refused = client.delete(f"{API}/projects/{pid}", headers=editor)
    assert refused.status_code == 403 and "needs the role 'owner'" in refused.json()["detail"]
    assert invite(client, editor, pid, "x@lab.example", "viewer").status_code == 403
    assert (
        client.delete(f"{API}/projects/{pid}/members/{vera_id}", headers=editor).status_code == 403
    )

    # A member's token does what both its scope and the role allow.
    with unit_of_work(app.state.session_factory) as session:
        read_token = create_token(session=session, researcher_name="ed", scope="read")
    reading = {"Authorization": f"Bearer {read_token}"}
    assert client.get(f"{API}/projects/{pid}", headers=reading).status_code == 200
    scoped = client.patch(f"{API}/projects/{pid}", json={"name": "x"}, headers=reading)
    assert scoped.status_code == 403 and "this token's scope is 'read'" in scoped.json()["detail"]

    # A stranger learns nothing of it.
    mallory = colleague(app, "mallory@else.example", "mallory")
    assert client.get(f"{API}/projects/{pid}/members", headers=mallory).status_code == 404
    assert client.get(f"{API}/projects", headers=mallory).json() == []


def test_the_owner_changes_roles_removes_members_and_hands_the_project_over(
    app, client, auth, project
):
    pid = project["id"]
    bob, bob_id = joined(client, app, auth, pid, "bob", "viewer")

    promoted = client.patch(
        f"{API}/projects/{pid}/members/{bob_id}", json={"role": "editor"}, headers=auth
    )
    assert promoted.status_code == 200 and promoted.json()[1]["role"] == "editor"
    assert client.patch(f"{API}/projects/{pid}", json={"name": "b"}, headers=bob).status_code == 200

    handed = client.post(
        f"{API}/projects/{pid}/owner", json={"researcher_id": bob_id}, headers=auth
    )
    assert handed.status_code == 200, handed.text
    assert [(m["name"], m["role"]) for m in handed.json()] == [
        ("bob", "owner"),
        ("alice", "editor"),
    ]
    # Alice, an editor now, cannot delete it; Bob can manage it.
    assert client.delete(f"{API}/projects/{pid}", headers=auth).status_code == 403
    alice_id = handed.json()[1]["researcher_id"]
    removed = client.delete(f"{API}/projects/{pid}/members/{alice_id}", headers=bob)
    assert removed.status_code == 204
    assert client.get(f"{API}/projects/{pid}", headers=auth).status_code == 404
    assert client.get(f"{API}/projects", headers=auth).json() == []
    # The owner stays: removing them, or making them a member, is refused by name.
    owner = client.delete(f"{API}/projects/{pid}/members/{bob_id}", headers=bob)
    assert owner.status_code == 422 and "hand the project over first" in owner.json()["detail"]


def test_an_invitation_joins_its_address_once_while_it_lasts(app, client, auth, project):
    pid = project["id"]
    carol = colleague(app, "carol@lab.example", "carol")
    dave = colleague(app, "dave@lab.example", "dave")
    invited = invite(client, auth, pid, "Carol@Lab.example ", "viewer")
    assert invited.status_code == 201, invited.text
    assert invited.json()["email"] == "carol@lab.example"
    secret = secret_of(invited.json()["link"])
    assert invited.json()["link"].endswith(f"/invitations/{secret}")
    pending = client.get(f"{API}/projects/{pid}/invitations", headers=auth).json()
    assert [row["email"] for row in pending] == ["carol@lab.example"]
    assert "link" not in pending[0]  # the secret is shown once

    wrong = client.post(f"{API}/invitations/{secret}/accept", headers=dave)
    assert wrong.status_code == 422 and "this invitation is for carol@lab.example" in wrong.text
    assert client.post(f"{API}/invitations/{secret}/accept", headers=carol).status_code == 200
    again = client.post(f"{API}/invitations/{secret}/accept", headers=carol)
    assert again.status_code == 410 and "each link joins once" in again.json()["detail"]
    assert client.get(f"{API}/projects/{pid}/invitations", headers=auth).json() == []

    # Withdrawn, expired or made up: it joins nobody.
    withdrawn = invite(client, auth, pid, "dave@lab.example", "editor").json()
    deleted = client.delete(f"{API}/projects/{pid}/invitations/{withdrawn['id']}", headers=auth)
    assert deleted.status_code == 204
    refused = client.post(f"{API}/invitations/{secret_of(withdrawn['link'])}/accept", headers=dave)
    assert refused.status_code == 410 and "withdrawn" in refused.json()["detail"]
    late = invite(client, auth, pid, "dave@lab.example", "editor").json()
    with unit_of_work(app.state.session_factory) as session:
        session.execute(
            update(ProjectInvitation)
            .where(ProjectInvitation.id == late["id"])
            .values(expires_at=utcnow() - timedelta(minutes=1))
        )
    expired = client.post(f"{API}/invitations/{secret_of(late['link'])}/accept", headers=dave)
    assert expired.status_code == 410 and "expired" in expired.json()["detail"]
    made_up = client.post(f"{API}/invitations/not-a-real-one/accept", headers=dave)
    assert made_up.status_code == 404
    assert [
        m["name"] for m in client.get(f"{API}/projects/{pid}/members", headers=auth).json()
    ] == [
        "alice",
        "carol",
    ]


def test_bad_member_requests_are_refused_by_name_and_change_nothing(app, client, auth, project):
    pid = project["id"]
    joined(client, app, auth, pid, "erin", "viewer")
    before = client.get(f"{API}/projects/{pid}/members", headers=auth).json()
    erin_id = before[1]["researcher_id"]

    role = invite(client, auth, pid, "x@lab.example", "admin")
    assert role.status_code == 422 and "role: 'admin' is not a member's role" in role.text
    email = invite(client, auth, pid, "not an address", "viewer")
    assert email.status_code == 422 and "is not an email address" in email.text
    member = invite(client, auth, pid, "erin@lab.example", "editor")
    assert (
        member.status_code == 409 and "erin@lab.example is in this project already" in member.text
    )
    owner_role = client.patch(
        f"{API}/projects/{pid}/members/{erin_id}", json={"role": "owner"}, headers=auth
    )
    assert owner_role.status_code == 422
    stranger = client.post(
        f"{API}/projects/{pid}/owner", json={"researcher_id": 99999}, headers=auth
    )
    assert stranger.status_code == 422 and "99999 is not a member" in stranger.text
    assert client.delete(f"{API}/projects/{pid}/members/99999", headers=auth).status_code == 404
    assert client.get(f"{API}/projects/{pid}/members", headers=auth).json() == before
    assert client.get(f"{API}/projects/{pid}/invitations", headers=auth).json() == []


def test_a_viewer_sees_raters_by_pseudonym_until_allowed_their_ids(app, client, auth, project):
    """Every export and list that names a rater names them `rater-<id>` for a viewer the
    owner has not allowed the participants' ids; allowed, the viewer sees the ids."""
    pid = project["id"]
    items = "key,text\n" + "".join(f"w{i},word {i}\n" for i in range(4))
    assert upload(client, auth, pid, "items", "items.csv", items).status_code == 201
    answers = "anchor,closer,farther,rater\nw0,w1,w2,PROLIFIC-5f3a\nw1,w2,w3,PROLIFIC-5f3a\n"
    assert upload(client, auth, pid, "triplets", "answers.csv", answers).status_code == 201
    judgements = "format,item1,item2,item3,pick1,rater\nodd_one_out,w0,w1,w3,w3,PROLIFIC-77b\n"
    assert upload(client, auth, pid, "judgements", "j.csv", judgements).status_code == 201
    viewer, viewer_id = joined(client, app, auth, pid, "val", "viewer")

    def seen(bearer) -> str:
        found = []
        for export in ("triplets/export", "judgements/export"):
            for format in ("csv", "json", "parquet"):
                response = client.get(
                    f"{API}/projects/{pid}/{export}?format={format}", headers=bearer
                )
                assert response.status_code == 200, response.text
                if format == "parquet":
                    table = pq.read_table(io.BytesIO(response.content))
                    found.append(",".join(str(v) for v in table.column("rater").to_pylist()))
                else:
                    found.append(response.text)
        found.append(client.get(f"{API}/projects/{pid}/raters", headers=bearer).text)
        return "\n".join(found)

    hidden = seen(viewer)
    assert "PROLIFIC" not in hidden
    raters = client.get(f"{API}/projects/{pid}/raters", headers=viewer).json()
    assert all(rater["external_id"] == f"rater-{rater['id']}" for rater in raters)
    assert {f"rater-{rater['id']}" for rater in raters} <= set(re.findall(r"rater-\d+", hidden))
    filtered = client.get(
        f"{API}/projects/{pid}/triplets/export?rater=PROLIFIC-5f3a", headers=viewer
    )
    assert filtered.status_code == 403 and "by pseudonym" in filtered.json()["detail"]

    # The owner sees the ids; so does the viewer, once allowed.
    assert hidden != seen(auth) and "PROLIFIC-5f3a" in seen(auth) and "PROLIFIC-77b" in seen(auth)
    client.patch(
        f"{API}/projects/{pid}/members/{viewer_id}", json={"sees_participants": True}, headers=auth
    )
    assert seen(viewer) == seen(auth)


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], str]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, envelope.content.decode()))
        return "250 OK"


def test_with_a_mail_server_the_invitation_is_mailed_and_without_one_shown(
    app, client, auth, project
):
    from aiosmtpd.controller import Controller

    pid = project["id"]
    inbox = _Inbox()
    with socket.socket() as probe:  # a free port (aiosmtpd checks its own by connecting)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = Controller(inbox, hostname="127.0.0.1", port=port)
    server.start()
    try:
        app.state.settings = app.state.settings.model_copy(
            update={"smtp_host": "127.0.0.1", "smtp_port": port, "smtp_starttls": False}
        )
        invited = invite(client, auth, pid, "fay@lab.example", "editor")
        assert invited.status_code == 201, invited.text
        assert invited.json()["mailed"] is True and invited.json()["mail_error"] is None
        ((to, text),) = inbox.messages
        assert to == ["fay@lab.example"]
        assert invited.json()["link"] in text and 'project "shapes"' in text
        assert "as editor" in text
    finally:
        server.stop()
    # The server gone: the invitation is made all the same, and says why it was not mailed.
    refused = invite(client, auth, pid, "gus@lab.example", "viewer")
    assert refused.status_code == 201, refused.text
    assert refused.json()["mailed"] is False
    assert f"the mail server 127.0.0.1:{port} refused it" in refused.json()["mail_error"]
    pending = client.get(f"{API}/projects/{pid}/invitations", headers=auth).json()
    assert [row["email"] for row in pending] == ["fay@lab.example", "gus@lab.example"]
