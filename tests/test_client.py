"""closer_client against a live server (in a thread): what an analyst sees when the API
refuses, when a model has nothing to fit on yet, and when the token is wrong. The
README's example (tests/test_readme.py) runs the rest."""

from __future__ import annotations

import pandas as pd
import pytest

from closer_client import Client, CloserError
from tests.support.browser import serve_in_thread


@pytest.fixture
def closer(settings, new_token):
    token = new_token("analyst")["Authorization"].split()[1]
    with serve_in_thread(settings) as url, Client(url, token) as client:
        yield client


def test_a_refused_upload_names_the_row_and_stores_nothing(closer):
    project = closer.create_project("p")["id"]
    items = pd.DataFrame({"key": ["a", "b", "a"], "features": [[0, 0], [1, 1], [2, 2]]})
    with pytest.raises(CloserError) as refused:
        closer.upload_items(project, items)
    assert refused.value.status == 422
    assert "row 4" in str(refused.value) and "'a'" in str(refused.value)
    assert closer.items(project).empty
    closer.upload_items(project, items.iloc[:2])
    stored = closer.items(project)
    assert list(stored["key"]) == ["a", "b"] and list(stored["features"][1]) == [1.0, 1.0]


def test_missing_features_in_a_dataframe_reach_the_server_as_missing(closer):
    """pandas' missing values (None, NaN) in a features column are sent as no features,
    so the server's own rule speaks: some items with features and some without is
    refused, naming the rows; none with features is stored so."""
    project = closer.create_project("p")["id"]
    features = [[0.5, 1.0], None, float("nan")]
    with pytest.raises(CloserError) as refused:
        closer.upload_items(project, pd.DataFrame({"key": ["a", "b", "c"], "features": features}))
    assert "row 3, column 'features': missing" in str(refused.value)
    assert "row 4, column 'features': missing" in str(refused.value)
    closer.upload_items(
        project, pd.DataFrame({"key": ["a", "b"], "features": [None, float("nan")]})
    )
    assert closer.items(project)["features"].isna().all()


def test_a_model_without_answers_times_out_saying_so(closer):
    project = closer.create_project("p")["id"]
    closer.upload_items(project, pd.DataFrame({"key": ["a", "b", "c"]}))
    model = closer.create_model(project, "tete", params={"n_components": 2}, min_answers=10)
    with pytest.raises(TimeoutError, match=f"model {model['id']} serves no version"):
        closer.wait_for_model(project, model["id"], timeout=0.3, poll=0.1)


def test_a_retried_triplet_upload_with_its_key_is_stored_once(closer):
    project = closer.create_project("p")["id"]
    closer.upload_items(project, pd.DataFrame({"key": ["a", "b", "c"]}))
    triplets = pd.DataFrame({"anchor": ["a"], "closer": ["b"], "farther": ["c"]})
    first = closer.upload_triplets(project, triplets, idempotency_key="batch-1")
    again = closer.upload_triplets(project, triplets, idempotency_key="batch-1")
    assert not first["replayed"] and again["replayed"]
    answers = closer.answers(project)
    assert len(answers) == 1 and answers["response_time_ms"].isna().all()
    assert str(answers["response_time_ms"].dtype) == "Int32"


def test_a_wrong_token_is_refused_plainly(settings):
    with serve_in_thread(settings) as url, Client(url, "not-a-token") as client:
        with pytest.raises(CloserError) as refused:
            client.projects()
    assert refused.value.status == 401


def test_judgements_members_and_webhooks_from_a_notebook(closer):
    project = closer.create_project("p")["id"]
    closer.upload_items(project, pd.DataFrame({"key": ["a", "b", "c", "d"]}))
    screens = pd.DataFrame(
        {"format": ["odd_one_out"], "item1": ["a"], "item2": ["b"], "item3": ["d"], "pick1": ["d"]}
    )
    stored = closer.upload_judgements(project, screens)
    assert stored["rows"] == 1
    assert len(closer.judgements(project)) == 1 and len(closer.answers(project)) == 2

    invited = closer.invite(project, "sam@lab.example", "viewer")
    assert invited["link"].rsplit("/", 2)[-2] == "invitations" and invited["mailed"] is False
    assert list(closer.members(project)["role"]) == ["owner"]  # until Sam joins
    with pytest.raises(CloserError, match="role: 'boss' is not a member's role"):
        closer.invite(project, "x@lab.example", "boss")

    hook = closer.create_webhook(project, "http://127.0.0.1:9/closer", ["model.ready"])
    assert hook["secret"].startswith("whsec_")
    assert list(closer.webhooks(project)["url"]) == ["http://127.0.0.1:9/closer"]
    assert closer.deliveries(project, hook["id"]).empty
