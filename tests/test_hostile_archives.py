"""Issue 32, holes 1-3: hostile project archives on both databases. Every case of the
probe is a 4xx that names what is wrong, stores nothing (no project, hidden or not, no
answer, no image), and costs bounded memory; a retried import makes one project."""

from __future__ import annotations

import base64
import io
import itertools
import json
import zipfile

import numpy as np
import pytest
from sqlalchemy import func, select

from app.core.db import unit_of_work
from app.models import Project, Rater, Triplet
from app.worker.loop import Worker
from tests.support.memory import PeakMemory
from tests.support.saved_states import with_array
from tests.support.uploads import upload, zip_bytes

API = "/api/v1"
MIB = 1 << 20


@pytest.fixture
def exported(app, client, auth, project) -> dict[str, bytes]:
    """A small real project's archive: items, answers by raters and by upload, a build
    half way, a t-ETE model; its entries by name."""
    pid = project["id"]
    rows = ["key,label"] + [f"i{n},c{n % 3}" for n in range(12)]
    assert upload(client, auth, pid, "items", "items.csv", "\n".join(rows)).status_code == 201
    # Every comparison, answered by label: the first build completes at once (its
    # state has split nodes), the second (three answers a query) waits for more.
    answers = ["anchor,closer,farther,rater"]
    for anchor, p, q in itertools.permutations(range(12), 3):
        if p < q:  # by label; between two of the same standing, the lower key
            closer, farther = (q, p) if anchor % 3 == q % 3 != p % 3 else (p, q)
            answers.append(f"i{anchor},i{closer},i{farther},r{anchor % 3}")
    uploaded = upload(client, auth, pid, "triplets", "answers.csv", "\n".join(answers))
    assert uploaded.status_code == 201, uploaded.text
    for params in ({"n_trees": 2, "random_state": 1}, {"n_trees": 2, "answers_per_query": 3}):
        build = client.post(f"{API}/projects/{pid}/builds", headers=auth, json=params)
        assert build.status_code == 201, build.text
    Worker(app.state.session_factory).run(until_idle=True)
    model = client.post(
        f"{API}/projects/{pid}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "train": False},
    )
    assert model.status_code == 201, model.text
    download = client.get(f"{API}/projects/{pid}/archive", headers=auth)
    assert download.status_code == 200
    with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _described(parts: dict[str, bytes], change) -> dict[str, bytes]:
    description = json.loads(parts["project.json"])
    change(description)
    return {**parts, "project.json": json.dumps(description).encode()}


def _hostile_cases(parts: dict[str, bytes]) -> dict[str, tuple[dict[str, bytes], str]]:
    """Each case: the archive's entries, and a word the refusal must contain."""
    description = json.loads(parts["project.json"])
    build_ref = description["builds"][0]["ref"]
    state_name = f"builds/{build_ref}.state"
    state = parts[state_name]

    def located(document, path: str):
        """The container holding the last step of a dotted path, and that step."""
        *parents, last = (int(part) if part.isdigit() else part for part in path.split("."))
        for part in parents:
            document = document[part]
        return document, last

    def set_in(path: str, value):
        def change(document):
            container, last = located(document, path)
            container[last] = value

        return change

    def drop(path: str):
        def change(document):
            container, last = located(document, path)
            del container[last]

        return change

    cases = {
        "nested 100k deep": ({**parts, "project.json": b"[" * 100_000}, "nested too deep"),
        "rater answers 10**30": (
            {
                **parts,
                # json.dumps would write it as it is: the marker keeps the test honest.
                "project.json": _described(parts, set_in("raters.0.answers", 987654321))[
                    "project.json"
                ].replace(b"987654321", str(10**30).encode()),
            },
            "out of range",
        ),
        "rater answers 2**40": (_described(parts, set_in("raters.0.answers", 2**40)), "raters.0"),
        "time at its limit": (
            _described(parts, set_in("raters.0.created_at", "9999-12-31T23:59:59-14:00")),
            "created_at",
        ),
        "time of year 1": (
            _described(parts, set_in("project.created_at", "0001-01-01T00:00:00+14:00")),
            "created_at",
        ),
        "builds: ['x']": (_described(parts, set_in("builds", ["x"])), "builds.0"),
        "build without ref": (_described(parts, drop("builds.0.ref")), "builds.0.ref"),
        "raters: 5": (_described(parts, set_in("raters", 5)), "raters"),
        "agreement 'high'": (
            _described(parts, set_in("raters.0.majority_agreement", "high")),
            "majority_agreement",
        ),
        "min_answers 2**40": (
            _described(parts, set_in("models.0.min_answers", 2**40)),
            "models.0.min_answers",
        ),
        "project name 10,000 chars": (
            _described(parts, set_in("project.name", "n" * 10_000)),
            "project.name",
        ),
        "description 1 MB": (
            _described(parts, set_in("project.description", "d" * 1_000_000)),
            "project.description",
        ),
        "model name 10,000 chars": (
            _described(parts, set_in("models.0.name", "m" * 10_000)),
            "models.0.name",
        ),
        "NUL in the project's name": (
            _described(parts, set_in("project.name", "pilot\x00")),
            "NUL",
        ),
        "NUL in a rater's id": (
            _described(parts, set_in("raters.0.external_id", "r\x000")),
            "NUL",
        ),
        "n_trees 10**12": (
            _described(parts, set_in("builds.0.params.n_trees", 10**12)),
            "builds.0.params.n_trees",
        ),
        "leaf_size -5": (
            _described(parts, set_in("builds.0.params.leaf_size", -5)),
            "builds.0.params.leaf_size",
        ),
        "answers_read -1": (
            _described(parts, set_in("builds.0.answers_read", -1)),
            "builds.0.answers_read",
        ),
        "answers_read past the answers": (
            _described(parts, set_in("builds.0.answers_read", 10**6)),
            "answers_read",
        ),
        "node positions past the items": (
            {**parts, state_name: with_array(state, "node_pivot_left", lambda a: a + 500)},
            "node pivots",
        ),
        "a node its own child": (
            {
                **parts,
                state_name: with_array(state, "node_right", lambda a: np.where(a > 0, 0, a)),
            },
            "children",
        ),
        "garbage state marked complete": (
            {**parts, state_name: b"garbage" * 100},
            "not a saved build",
        ),
        "an unfinished state marked complete": (
            _described(parts, set_in("builds.1.status", "complete")),
            "open nodes",
        ),
        "params not the state's": (
            _described(parts, set_in("builds.0.params.leaf_size", 3)),
            "params",
        ),
        "a build over unknown items": (
            _described(parts, set_in("builds.0.items.0", "nowhere")),
            "nowhere",
        ),
        "a state bomb": (
            {
                **parts,
                state_name: with_array(state, "members", lambda a: np.zeros(10**7, a.dtype)),
            },
            "over the limit",
        ),
        "no state": ({k: v for k, v in parts.items() if k != state_name}, "no state"),
        "a model naming no build": (
            _described(parts, set_in("models.0.build_ref", 99)),
            "names build 99",
        ),
        "SMERF from a model it does not have": (
            _described(
                parts,
                set_in(
                    "models.0",
                    {"name": "s", "kind": "smerf", "params": {"embedding_model_id": 5}},
                ),
            ),
            "embedding",
        ),
        "format_version 99": (_described(parts, set_in("format_version", 99)), "format_version"),
        "a zip-slip entry": ({**parts, "../escape.txt": b"x"}, "escape"),
    }
    v1 = json.loads(parts["project.json"])
    v1["format_version"] = 1
    v1["builds"][0]["state"] = "not base64 !"
    cases["format 1, its state not base64"] = (
        {**parts, "project.json": json.dumps(v1).encode()},
        "base64",
    )
    return cases


def _stored(app, owner_name: str) -> dict[str, int]:
    with unit_of_work(app.state.session_factory) as session:
        return {
            "projects": session.scalar(select(func.count()).select_from(Project)),
            "triplets": session.scalar(select(func.count()).select_from(Triplet)),
            "raters": session.scalar(select(func.count()).select_from(Rater)),
        }


def test_hostile_archives_are_refused_naming_the_fault_and_store_nothing(
    app, client, auth, exported, new_token
):
    mallory = new_token("mallory")
    before = _stored(app, "mallory")
    media = app.state.settings.media_dir
    media_before = sorted(media.glob("*"))
    statuses = {}
    for name, (entries, expected) in _hostile_cases(exported).items():
        response = client.post(
            f"{API}/project-archives",
            headers=mallory,
            files={"file": ("hostile.zip", zip_bytes(entries))},
        )
        statuses[name] = response.status_code
        assert 400 <= response.status_code < 500, (name, response.status_code, response.text)
        assert expected in response.text, (name, response.text[:600])
    assert set(statuses.values()) <= {400, 413, 422}, statuses
    assert _stored(app, "mallory") == before
    assert client.get(f"{API}/projects", headers=mallory).json() == []
    assert sorted(media.glob("*")) == media_before
    # The honest archive still goes in, as format 2 and as format 1.
    honest = client.post(
        f"{API}/project-archives",
        headers=mallory,
        files={"file": ("honest.zip", zip_bytes(exported))},
    )
    assert honest.status_code == 201, honest.text
    description = json.loads(exported["project.json"])
    description["format_version"] = 1
    old = {k: v for k, v in exported.items() if not k.startswith("builds/")}
    for build in description["builds"]:
        state = exported[f"builds/{build['ref']}.state"]
        build["state"] = base64.b64encode(state).decode()
    old["project.json"] = json.dumps(description).encode()
    older = client.post(
        f"{API}/project-archives", headers=mallory, files={"file": ("v1.zip", zip_bytes(old))}
    )
    assert older.status_code == 201, older.text
    builds = client.get(f"{API}/projects/{older.json()['id']}/builds", headers=mallory).json()
    assert [build["status"] for build in builds] == ["complete", "running"]


def test_an_oversized_description_is_refused_before_it_is_parsed(
    app, client, auth, exported, new_token
):
    """Hole 1: a project.json over max_json_bytes is refused from the ZIP's directory; one
    under it but over the API's field limits is refused by the schema; memory stays
    bounded either way."""
    mallory = new_token("mallory")
    limit = app.state.settings.max_json_bytes
    description = json.loads(exported["project.json"])
    # Text that deflates well (a ratio near 8), as the probe's did, under the ratio cap.
    letters = np.random.default_rng(0).integers(0, 2, limit + MIB, dtype=np.uint8)
    filler = (letters + ord("a")).tobytes().decode()
    description["project"]["description"] = filler
    oversized = {**exported, "project.json": json.dumps(description).encode()}
    description["project"]["description"] = filler[: limit - MIB]
    under = {**exported, "project.json": json.dumps(description).encode()}
    growth = {}
    for name, entries, expected in (
        ("over max_json_bytes", oversized, "max_json_bytes"),
        ("a 15 MiB description", under, "project.description"),
    ):
        body = zip_bytes(entries)
        with PeakMemory() as memory:
            response = client.post(
                f"{API}/project-archives",
                headers=mallory,
                files={"file": ("big.zip", body)},
            )
        growth[name] = memory.growth / MIB
        assert response.status_code == 422, response.text[:300]
        assert expected in response.text
    print({name: f"+{value:.0f} MiB" for name, value in growth.items()}, len(body) / MIB)
    assert growth["over max_json_bytes"] < 40, growth
    assert growth["a 15 MiB description"] < 150, growth
    assert client.get(f"{API}/projects", headers=mallory).json() == []


def test_a_retried_import_makes_one_project(app, client, auth, exported, new_token):
    mallory = new_token("mallory")
    body = zip_bytes(exported)
    key = {"Idempotency-Key": "move-pilot-1"}
    first = client.post(
        f"{API}/project-archives", headers={**mallory, **key}, files={"file": ("a.zip", body)}
    )
    again = client.post(
        f"{API}/project-archives", headers={**mallory, **key}, files={"file": ("a.zip", body)}
    )
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert len(client.get(f"{API}/projects", headers=mallory).json()) == 1
    # Another archive under the same key is refused, not answered with the first project.
    other_body = zip_bytes(exported, compression=zipfile.ZIP_STORED)
    refused = client.post(
        f"{API}/project-archives", headers={**mallory, **key}, files={"file": ("a.zip", other_body)}
    )
    assert refused.status_code == 409, refused.text
    assert "Idempotency-Key 'move-pilot-1' was used for another request" in refused.text
    assert len(client.get(f"{API}/projects", headers=mallory).json()) == 1
    # The key is the researcher's own: another's same key makes their own project.
    other = client.post(
        f"{API}/project-archives", headers={**auth, **key}, files={"file": ("a.zip", body)}
    )
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
