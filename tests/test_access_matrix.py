"""Every route, tried anonymously, as a rater, as another researcher and as the owner
(issue 15), with each token scope, and as each role a member can hold (issue 55). The
routes come from the app's own route table, so a new route is tried too, and one that
fits none of the kinds below fails the test until it is classified."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sklearn.datasets import make_blobs

from tests.support.builds import finished_build as finished_build_of
from tests.support.links import open_link
from tests.support.members import joined
from tests.support.uploads import png, zip_bytes

API = "/api/v1"

# Served to anyone: the pages and files of the service itself, and signing in and out
# (a form posted without its CSRF token is a 403).
PUBLIC = {
    "/login",
    "/login/link",
    "/logout",
    "/favicon.ico",
    "/static/{path}",
    "/static/vendor/htmx/{path}",
    "/static/vendor/echarts/{path}",
    "/static/vendor/swagger-ui/{path}",
    "/static/vendor/redoc/{path}",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    f"{API}/health",
    # Off unless CLOSER_METRICS_TOKEN is set (404), and then for that bearer only
    # (tests/test_metrics.py).
    "/metrics",
}


def route_table(app) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers and mounts too."""
    found: list[tuple[str, str]] = []
    for route in app.routes:
        if hasattr(route, "effective_route_contexts"):  # an included router
            for context in route.effective_route_contexts():
                found += [(method, context.path_format) for method in context.methods or ()]
        elif hasattr(route, "routes") and not hasattr(route, "methods"):  # a mount
            found.append(("GET", route.path + "/{path}"))
        else:
            found += [(method, route.path) for method in route.methods or ()]
    return sorted(
        {(method, path) for method, path in found if method != "HEAD"},
        key=lambda entry: (entry[0] == "DELETE", entry[1].count("/"), entry),
    )


# Valid bodies, so that what answers is the access check, not the body's validation
# (which runs first and is the same for everyone). Others get `{}`.
BODIES = {
    ("POST", f"{API}/rate/{{slug}}/answers"): {"query_id": 1, "choice": "left"},
    ("POST", f"{API}/rate/{{slug}}/consent"): {"agree": True},
    ("POST", f"{API}/rate/{{slug}}/questionnaire"): {"answers": {}},
    ("PATCH", f"{API}/projects/{{project_id}}"): {"name": "mine now"},
    ("PATCH", f"{API}/projects/{{project_id}}/rating"): {"instructions": "mine now"},
    ("POST", f"{API}/projects/{{project_id}}/webhooks"): {
        "url": "http://127.0.0.1:9/mine-now",
        "events": ["model.ready"],
    },
    ("PATCH", f"{API}/projects/{{project_id}}/items/{{key}}"): {"label": "mine now"},
    ("PUT", f"{API}/projects/{{project_id}}/link"): {"state": "paused"},
    ("POST", f"{API}/projects/{{project_id}}/models"): {"name": "x", "kind": "tete"},
    ("PATCH", f"{API}/projects/{{project_id}}/models/{{model_id}}"): {"auto_refit": False},
    ("PATCH", f"{API}/projects/{{project_id}}/raters/{{rater_id}}"): {"excluded": True},
    ("POST", f"{API}/projects/{{project_id}}/models/{{model_id}}/distances"): {
        "pairs": [["p0", "p1"]]
    },
    ("POST", f"{API}/projects/{{project_id}}/models/{{model_id}}/choices"): {
        "screens": [{"format": "odd_one_out", "items": ["p0", "p1", "p2"]}]
    },
    ("POST", f"{API}/projects/{{project_id}}/routings/{{routing_id}}/answers"): {
        "answers": [["p55", "p1", "p2"]]
    },
}


# The workspace's pages: a researcher's own list and tokens, and pages of a project.
WORKSPACE_OWN = {
    "/",
    "/projects",
    "/project-archives",
    "/tokens",
    "/tokens/{token_id}/revoke",
    "/logout/everywhere",
}


def kind_of(path: str) -> str:
    if path in PUBLIC:
        return "public"
    if path in WORKSPACE_OWN:
        return "own pages"
    if path.startswith("/projects/{project_id}"):
        return "project pages"
    if path in (f"{API}/projects", f"{API}/project-archives", f"{API}/tokens"):
        return "own projects"  # every researcher has their own list
    if path.startswith(f"{API}/tokens/"):
        return "researcher"  # another's token does not exist (404)
    if path.startswith(f"{API}/projects"):
        return "researcher"
    if path == f"{API}/invitations/{{secret}}/accept":
        return "researcher"  # joins the caller's account: a made-up link is a 404
    if path == "/invitations/{secret}":
        return "invitation"  # anyone with the link
    if path == f"{API}/rate/{{slug}}/raters" or path.startswith("/r/{slug}"):
        return "study"  # anyone with the link
    if path.startswith(f"{API}/rate/{{slug}}/"):
        return "rater"
    return "unclassified"


@pytest.fixture
def scenario(app, client, auth, new_token, project):
    """Alice's project: a finished build, a routing, images, a model and a
    rater; Mallory, another researcher, with a project of her own."""
    X, y = make_blobs(n_samples=70, centers=3, cluster_std=1.0, random_state=2)
    pid, build_id, keys = finished_build_of(app, client, auth, project["id"], X, y)
    archive = zip_bytes(
        {"manifest.csv": "key,label,features,image\nimg0,0,0 0,0.png\n", "0.png": png()}
    )
    uploaded = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("set.zip", archive)}
    )
    assert uploaded.status_code == 201, uploaded.text
    routed = client.post(
        f"{API}/projects/{pid}/builds/{build_id}/routings",
        json={"items": keys[55:57], "ask_raters": False},
        headers=auth,
    )
    assert routed.status_code == 201, routed.text
    model = client.post(
        f"{API}/projects/{pid}/models",
        json={"name": "m", "kind": "tete", "train": False},
        headers=auth,
    ).json()
    slug = open_link(client, auth, pid)["public_slug"]
    item = client.get(f"{API}/projects/{pid}/items/img0", headers=auth).json()
    spare = client.post(f"{API}/tokens", json={"name": "spare", "scope": "read"}, headers=auth)
    assert spare.status_code == 201, spare.text
    _, bystander_id = joined(
        app=app, client=client, auth=auth, pid=pid, name="bystander", role="viewer"
    )
    waiting = client.post(
        f"{API}/projects/{pid}/invitations",
        json={"email": "waiting@lab.example", "role": "viewer"},
        headers=auth,
    )
    assert waiting.status_code == 201, waiting.text
    hook = client.post(
        f"{API}/projects/{pid}/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["participant.completed"]},
        headers=auth,
    )
    assert hook.status_code == 201, hook.text
    mallory = new_token("mallory")
    client.post(f"{API}/projects", json={"name": "mallory's"}, headers=mallory)
    return {
        "params": {
            "project_id": pid,
            "build_id": build_id,
            "model_id": model["id"],
            "routing_id": routed.json()["id"],
            "number": 1,
            "key": "img0",
            "item_id": item["id"],
            "slug": slug,
            "filename": item["image_url"].rsplit("/", 1)[-1],
            "path": "css/closer.css",
            "token_id": spare.json()["id"],
            "kind": "items",
            "action": "pause",
            "participant": "r1",  # the rater the tests join as
            "researcher_id": bystander_id,
            "invitation_id": waiting.json()["id"],
            "secret": "made-up",
            "webhook_id": hook.json()["id"],
        },
        "mallory": mallory,
    }


VENDOR_FILES = {
    "htmx": "htmx.min.js",
    "echarts": "echarts.min.js",
    "swagger-ui": "swagger-ui.css",
    "redoc": "redoc.standalone.js",
}
# Required query parameters, for the same reason.
QUERIES = {f"{API}/projects/{{project_id}}/models/{{model_id}}/neighbors": "?item=img0"}


def _url(path: str, params: dict) -> str:
    if path.startswith("/static/vendor/"):
        return path.replace("{path}", VENDOR_FILES[path.split("/")[3]])
    return re.sub(r"{(\w+)}", lambda m: str(params[m.group(1)]), path) + QUERIES.get(path, "")


def _send(client: TestClient, method: str, path: str, params: dict, headers: dict | None = None):
    body = BODIES.get((method, path), {}) if method in ("POST", "PATCH", "PUT") else None
    return client.request(
        method, _url(path, params), json=body, headers=headers or {}, follow_redirects=False
    )


def _snapshot(client, auth, pid) -> dict:
    """What Alice would notice if a stranger changed her project."""
    return {
        "project": client.get(f"{API}/projects/{pid}", headers=auth).json(),
        "rating": client.get(f"{API}/projects/{pid}/rating", headers=auth).json(),
        "models": client.get(f"{API}/projects/{pid}/models", headers=auth).json(),
        "webhooks": client.get(f"{API}/projects/{pid}/webhooks", headers=auth).json(),
        "builds": client.get(f"{API}/projects/{pid}/builds", headers=auth).json(),
        "items": client.get(f"{API}/projects/{pid}/items?limit=1000", headers=auth).json(),
        # Anyone may join (new raters), but nobody else may exclude one.
        "excluded": [
            rater["id"]
            for rater in client.get(f"{API}/projects/{pid}/raters", headers=auth).json()
            if rater["excluded"]
        ],
    }


def test_every_route_answers_each_kind_of_caller_as_it_should(app, client, auth, scenario):
    params, mallory = scenario["params"], scenario["mallory"]
    table = route_table(app)
    unclassified = [f"{method} {path}" for method, path in table if kind_of(path) == "unclassified"]
    assert unclassified == [], "classify these new routes in tests/test_access_matrix.py"
    assert len(table) >= 50

    with TestClient(app) as anonymous, TestClient(app) as rater_client:
        rater_client.post(f"/r/{params['slug']}/start", data={"participant": "r1"})
        joined = rater_client.post(f"{API}/rate/{params['slug']}/raters", json={}).json()
        rater = {"X-Rater-Token": joined["rater_token"]}
        raters = client.get(f"{API}/projects/{params['project_id']}/raters", headers=auth).json()
        params["rater_id"] = raters[0]["id"]
        before = _snapshot(client, auth, params["project_id"])
        refused: list[str] = []
        for method, path in table:
            kind = kind_of(path)
            anonymous_status = _send(anonymous, method, path, params).status_code
            as_rater = _send(rater_client, method, path, params, rater).status_code
            as_other = _send(client, method, path, params, mallory).status_code
            if kind == "researcher":
                # Another researcher learns nothing: 404 as for a project that does not
                # exist (or the body's 422, the same for every project).
                others = (
                    {404}
                    if (method, path) in BODIES or method in ("GET", "DELETE")
                    else {
                        404,
                        422,
                    }
                )
                checks = (anonymous_status == 401, as_rater == 401, as_other in others)
            elif kind == "own projects":
                checks = (anonymous_status == 401, as_rater == 401, as_other < 500)
            elif kind in ("own pages", "project pages"):
                # A browser that is not signed in is sent to sign in; a form posted
                # without the page's CSRF token is refused before anything else.
                refused_status = 303 if method == "GET" else 403
                if method != "GET":
                    other = 403
                elif kind == "project pages":
                    other = 404
                else:
                    other = 200
                checks = (
                    anonymous_status == refused_status,
                    as_rater == refused_status,
                    as_other == other,
                )
            elif kind == "invitation":
                # (404: no such link; 403: a form posted without its page's CSRF token)
                expected = 404 if method == "GET" else 403
                checks = tuple(
                    status == expected for status in (anonymous_status, as_rater, as_other)
                )
            elif kind == "rater":  # a researcher's token is no rater's
                # (404 for the rater: query 1 is not one they were shown; 409: this study
                # asks no consent to give, nor a questionnaire)
                checks = (anonymous_status == 401, as_rater in (200, 404, 409), as_other == 401)
            else:  # public, and the study's link: anyone
                # (404: a media file it lacks; 422: a bad form; signing in: 400 for a
                # stale link, 403 for a form without its CSRF token)
                tolerated = (404, 422, 400, 403) if path.startswith("/log") else (404, 422)
                checks = tuple(
                    status < 400 or status in tolerated
                    for status in (anonymous_status, as_rater, as_other)
                )
            if not all(checks):
                refused.append(f"{method} {path}: {anonymous_status} {as_rater} {as_other}")
        assert refused == [], "\n".join(refused)
        assert _snapshot(client, auth, params["project_id"]) == before  # nothing changed
        listed = client.get(f"{API}/projects", headers=mallory).json()
        assert [project["name"] for project in listed] == ["mallory's"]

        for method, path in table:  # the owner last: DELETE routes come at the end
            if kind_of(path) == "project pages" and method == "GET":
                status = _send(client, method, path, params, auth).status_code
                # (303: the downloads form hands its filters on to the API's export)
                assert status in (200, 303), f"{method} {path}: {status}"
            if kind_of(path) != "researcher":
                continue
            status = _send(client, method, path, params, auth).status_code
            assert status not in (401, 403) and status < 500, f"{method} {path}: {status}"


# What each token scope may reach, in the words rather than the app's table.
# predict: predictions, embeddings, distances, neighbours, choices on screens and models'
# status (CompRF predicts by routing: its routings are polled as its predictions are).
MODEL = f"{API}/projects/{{project_id}}/models/{{model_id}}"
SERVING = {
    ("GET", f"{API}/projects/{{project_id}}/models"),
    ("GET", MODEL),
    ("GET", f"{MODEL}/versions"),
    ("GET", f"{MODEL}/versions/{{number}}"),
    ("POST", f"{MODEL}/predict"),
    ("GET", f"{MODEL}/embedding"),
    ("POST", f"{MODEL}/distances"),
    ("POST", f"{MODEL}/choices"),
    ("GET", f"{MODEL}/neighbors"),
    *(
        ("GET", f"{API}/projects/{{project_id}}/{noun}/{{routing_id}}{tail}")
        for noun in ("routings", "predictions")
        for tail in ("", "/queries")
    ),
}
# Posted, and changing nothing: what a build would take.
CHANGING_NOTHING = {
    ("POST", f"{API}/projects/{{project_id}}/builds/estimate"),
    ("POST", "/projects/{project_id}/builds/estimate"),
}
# The whole account's: tokens, signed-in browsers, deleting a project, erasing a
# participant.
WHOLE_ACCOUNT = {
    ("DELETE", f"{API}/projects/{{project_id}}"),
    ("DELETE", f"{API}/projects/{{project_id}}/participants/{{participant}}"),
    ("POST", "/projects/{project_id}/raters/{rater_id}/erase"),
    ("POST", "/projects/{project_id}/delete"),
    ("GET", "/tokens"),
    ("POST", "/tokens"),
    ("POST", "/tokens/{token_id}/revoke"),
    ("POST", "/logout/everywhere"),
    ("GET", f"{API}/tokens"),
    ("POST", f"{API}/tokens"),
    ("DELETE", f"{API}/tokens/{{token_id}}"),
    ("POST", f"{API}/invitations/{{secret}}/accept"),
}
# Who shares a project, in which role, and who owns it: its owner's (and of tokens,
# only an admin one's).
MANAGING_MEMBERS = {
    ("GET", f"{API}/projects/{{project_id}}/invitations"),
    ("POST", f"{API}/projects/{{project_id}}/invitations"),
    ("DELETE", f"{API}/projects/{{project_id}}/invitations/{{invitation_id}}"),
    ("PATCH", f"{API}/projects/{{project_id}}/members/{{researcher_id}}"),
    ("DELETE", f"{API}/projects/{{project_id}}/members/{{researcher_id}}"),
    ("POST", f"{API}/projects/{{project_id}}/owner"),
    ("POST", "/projects/{project_id}/members/invite"),
    ("POST", "/projects/{project_id}/members/{researcher_id}"),
    ("POST", "/projects/{project_id}/invitations/{invitation_id}/revoke"),
}
WHOLE_ACCOUNT |= MANAGING_MEMBERS
# The participants' platform ids: their list, its CSV, one's records, the archive.
IDENTIFYING = {
    ("GET", f"{API}/projects/{{project_id}}/participants"),
    ("GET", f"{API}/projects/{{project_id}}/participants/export"),
    ("GET", f"{API}/projects/{{project_id}}/participants/{{participant}}/records"),
    ("GET", f"{API}/projects/{{project_id}}/archive"),
    ("GET", "/projects/{project_id}/participants"),
    ("GET", f"{API}/projects/{{project_id}}/webhooks/{{webhook_id}}/deliveries"),
}
# Only the owner deletes the project (and manages its members).
OWNERS = MANAGING_MEMBERS | {
    ("DELETE", f"{API}/projects/{{project_id}}"),
    ("POST", "/projects/{project_id}/delete"),
}
SCOPES = ("predict", "read", "write", "admin")


def scope_allows(scope: str, method: str, path: str) -> bool:
    if scope == "admin" or (method, path) in SERVING:
        return True
    if scope == "predict" or (method, path) in WHOLE_ACCOUNT:
        return False
    return scope == "write" or method == "GET" or (method, path) in CHANGING_NOTHING


def role_allows(role: str, method: str, path: str) -> bool:
    """In the issue's words: an editor does everything but deleting the project and
    managing its members; a viewer reads pages and exports and changes nothing, and sees
    no rater identities unless allowed ("viewer+ids")."""
    if (method, path) in OWNERS:
        return False
    if role == "editor":
        return True
    if (method, path) in IDENTIFYING:
        return role == "viewer+ids"
    return method == "GET" or (method, path) in SERVING | CHANGING_NOTHING


def declared_actions(app) -> dict[tuple[str, str], list[str]]:
    """The actions each route's dependencies declare (app/auth/deps.py's `requires`)."""

    def actions(dependant) -> list[str]:
        found = [getattr(dependant.call, "action", None)] if dependant.call else []
        for sub in dependant.dependencies:
            found += actions(sub)
        return [action for action in found if action is not None]

    declared: dict[tuple[str, str], list[str]] = {}
    for route in app.routes:
        contexts = (
            route.effective_route_contexts()
            if hasattr(route, "effective_route_contexts")
            else [route]
            if hasattr(route, "dependant")
            else []
        )
        for context in contexts:
            path = getattr(context, "path_format", None) or route.path
            for method in context.methods or ():
                declared[(method, path)] = actions(context.dependant)
    return declared


RESEARCHERS = ("researcher", "own projects", "own pages", "project pages")
# Routes to send last in a scope's round: they end the round's browser session or the
# project itself.
ENDINGS = {("POST", "/logout/everywhere"), ("DELETE", f"{API}/projects/{{project_id}}")}


def test_every_researchers_route_declares_one_action_and_the_others_none(app):
    declared = declared_actions(app)
    wrong = []
    for method, path in route_table(app):
        actions = declared.get((method, path), [])
        if kind_of(path) in RESEARCHERS and len(actions) != 1:
            wrong.append(f"{method} {path}: {actions or 'no action'}")
        if kind_of(path) not in RESEARCHERS and actions:
            wrong.append(f"{method} {path} is not a researcher's route but declares {actions}")
    assert wrong == [], "\n".join(wrong)


def _scoped(app, scope: str, projects: list[int] | None) -> str:
    from app.auth.service import create_token
    from app.core.db import unit_of_work

    with unit_of_work(app.state.session_factory) as session:
        return create_token(
            session=session, researcher_name="alice", scope=scope, project_ids=projects
        )


def _statuses_as(app, client, scope: str, token: str, routes: list, params: dict):
    """(method, path, status) of each route called with this token: by its bearer for
    the API, and for the pages from a browser signed in with it (a predict token does
    not sign in: its bearer, refused)."""
    from tests.support.workspace import page_csrf, signed_in_browser

    bearer = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as browser:
        page_headers = bearer
        if scope != "predict":
            signed_in_browser(browser, token=token)
            page_headers = {"X-CSRF-Token": page_csrf(browser, "/")}
        for method, path in routes:
            api = path.startswith(API)
            sent = _send(
                client if api else browser, method, path, params, bearer if api else page_headers
            )
            yield method, path, sent.status_code


def test_every_scope_reaches_what_it_is_for_and_a_limited_token_no_other_project(
    app, client, auth, scenario
):
    """Callers × scopes × routes: a token of each scope over all of Alice's projects may
    do exactly what its scope is for in her project (refused: 403); a token limited to
    another project of hers finds this one nowhere (404), whatever its scope."""
    params = scenario["params"]
    with TestClient(app) as rater_client:
        rater_client.post(f"/r/{params['slug']}/start", data={"participant": "r1"})
    raters = client.get(f"{API}/projects/{params['project_id']}/raters", headers=auth).json()
    params["rater_id"] = raters[0]["id"]
    table = [
        (method, path)
        for method, path in route_table(app)
        if kind_of(path) in RESEARCHERS and (method, path) not in ENDINGS
    ] + sorted(ENDINGS, key=lambda entry: entry[0] == "DELETE")
    elsewhere = client.post(f"{API}/projects", json={"name": "elsewhere"}, headers=auth).json()
    project_routes = [(m, p) for m, p in table if "{project_id}" in p]
    wrong: list[str] = []
    for scope in SCOPES:
        limited = _scoped(app, scope, [elsewhere["id"]])
        for method, path, status in _statuses_as(
            app, client, scope, limited, project_routes, params
        ):
            # (A predict token signs in nowhere: a form it posts by bearer is refused for
            # its missing CSRF token before anything is looked up.)
            page_form = not path.startswith(API) and method != "GET"
            refused = {404, 403} if scope == "predict" and page_form else {404}
            if status not in refused:
                wrong.append(f"{scope} token of another project: {method} {path}: {status}")
    for scope in SCOPES:
        token = _scoped(app, scope, None)
        for method, path, status in _statuses_as(app, client, scope, token, table, params):
            allowed = scope_allows(scope, method, path)
            if status >= 500 or status == 401 or (status == 403) == allowed:
                wrong.append(
                    f"{scope}: {method} {path}: {status} "
                    f"({'should be allowed' if allowed else 'should be refused'})"
                )
    assert wrong == [], "\n".join(wrong)


def test_every_role_reaches_what_it_is_for_in_a_shared_project(app, client, auth, scenario):
    """Callers × roles × routes: a member of Alice's project, with a token of their whole
    account's power (and signed in with it for the pages), may do exactly what their
    role is for there (refused: 403), and the owner's own routes stay hers."""
    params = scenario["params"]
    pid = params["project_id"]
    with TestClient(app) as rater_client:
        rater_client.post(f"/r/{params['slug']}/start", data={"participant": "r1"})
    params["rater_id"] = client.get(f"{API}/projects/{pid}/raters", headers=auth).json()[0]["id"]
    routes = [
        (method, path)
        for method, path in route_table(app)
        if kind_of(path) in RESEARCHERS and "{project_id}" in path
    ]
    wrong: list[str] = []
    for role in ("viewer", "viewer+ids", "editor"):
        bearer, member_id = joined(
            client, app, auth, pid, role.replace("+", "_"), role.split("+")[0]
        )
        if role == "viewer+ids":
            allowed = client.patch(
                f"{API}/projects/{pid}/members/{member_id}",
                json={"sees_participants": True},
                headers=auth,
            )
            assert allowed.status_code == 200, allowed.text
        assert client.get(f"{API}/projects/{pid}", headers=bearer).status_code == 200
        token = bearer["Authorization"].split()[1]
        for method, path, status in _statuses_as(app, client, "admin", token, routes, params):
            should = role_allows(role, method, path)
            if status >= 500 or status == 401 or (status == 403) == should:
                wrong.append(
                    f"{role}: {method} {path}: {status} "
                    f"({'should be allowed' if should else 'should be refused'})"
                )
    assert wrong == [], "\n".join(wrong)
    names = [
        member["name"]
        for member in client.get(f"{API}/projects/{pid}/members", headers=auth).json()
    ]
    assert (
        names[0] == "alice" and client.get(f"{API}/projects/{pid}", headers=auth).status_code == 200
    )
