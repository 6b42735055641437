"""A Python client for Closer's REST API, for analysts: sign in with a token, list and
make projects, upload items and triplets, fetch answers, judgements, items and
embeddings as pandas DataFrames (Parquet under the hood: typed columns, nothing parsed
from text), train a model, wait for it and predict.

    from closer_client import Client

    closer = Client("http://127.0.0.1:8000", token="cl_...")
    answers = closer.answers(project_id)          # a DataFrame, a row an answer

Every error the API reports is a `CloserError` carrying its status and the API's own
message (which names the row, field or limit at fault)."""

from __future__ import annotations

import io
import math
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import httpx
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["Client", "Closer", "CloserError"]

_NULLABLE = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}

# A file to upload: a path, the bytes of one, or a DataFrame (sent as CSV).
Upload: TypeAlias = "str | os.PathLike[str] | bytes | pd.DataFrame"


class CloserError(Exception):
    """What the API refused, and why: `status` (the HTTP status) and `detail` (its body)."""

    def __init__(self, status: int, detail: Any, url: str) -> None:
        self.status, self.detail, self.url = status, detail, url
        super().__init__(f"{status} from {url}: {_message(detail)}")


def _message(detail: Any) -> str:
    """The API's words: its `detail`, or each problem of a refused upload or request."""
    found = detail.get("detail", detail) if isinstance(detail, Mapping) else detail
    if isinstance(found, list):
        return "; ".join(
            str(problem.get("msg", problem)) if isinstance(problem, Mapping) else str(problem)
            for problem in found
        )
    return str(found)


class Client:
    """A connection to one Closer server with one API token (`closer create-token`, or
    the workspace's Tokens page). Use it as a context manager, or call `close()`."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0) -> None:
        base = url.rstrip("/")
        if not base.endswith("/api/v1"):
            base += "/api/v1"
        self._http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # Projects ---------------------------------------------------------------------

    def projects(self) -> pd.DataFrame:
        """The projects this token may see, a row each."""
        return pd.DataFrame(self._json("GET", "/projects"))

    def project(self, project_id: int) -> dict[str, Any]:
        return self._json("GET", f"/projects/{project_id}")

    def create_project(self, name: str, description: str = "") -> dict[str, Any]:
        """A new project; its `id` is what the other calls take."""
        return self._json("POST", "/projects", json={"name": name, "description": description})

    # Uploads ----------------------------------------------------------------------

    def upload_items(self, project_id: int, items: Upload, *, filename: str | None = None):
        """Items from a CSV, JSON or ZIP file (a path or its bytes), or a DataFrame with the
        columns the CSV takes (key; optional label, text, split, features). All or
        nothing: a bad file changes nothing and raises, naming the row and column."""
        return self._upload(f"/projects/{project_id}/items", items, filename, None)

    def upload_triplets(
        self,
        project_id: int,
        triplets: Upload,
        *,
        filename: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Triplets (anchor, closer, farther: item keys) from a CSV or JSON file or a
        DataFrame. Sent with an Idempotency-Key (a fresh one unless given), so a retry
        after a lost reply stores them once."""
        key = idempotency_key or f"closer-client-{uuid.uuid4()}"
        return self._upload(f"/projects/{project_id}/triplets", triplets, filename, key)

    def upload_judgements(
        self,
        project_id: int,
        judgements: Upload,
        *,
        filename: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Judgements (format, item1.., pick1..; the judgements export's layout) from a
        CSV or JSON file or a DataFrame, each stored with the triplets it implies. Sent
        with an Idempotency-Key, as triplets are."""
        key = idempotency_key or f"closer-client-{uuid.uuid4()}"
        return self._upload(f"/projects/{project_id}/judgements", judgements, filename, key)

    # Sharing and webhooks ---------------------------------------------------------

    def members(self, project_id: int) -> pd.DataFrame:
        """Who shares the project: the owner first, then each member and their role."""
        return pd.DataFrame(self._json("GET", f"/projects/{project_id}/members"))

    def invite(self, project_id: int, email: str, role: str = "viewer") -> dict[str, Any]:
        """A single-use invitation link for `email` in `role` (editor or viewer): mailed
        where the server has a mail server (`mailed`), else to send yourself (`link`)."""
        body = {"email": email, "role": role}
        return self._json("POST", f"/projects/{project_id}/invitations", json=body)

    def webhooks(self, project_id: int) -> pd.DataFrame:
        return pd.DataFrame(self._json("GET", f"/projects/{project_id}/webhooks"))

    def create_webhook(
        self, project_id: int, url: str, events: Sequence[str], secret: str | None = None
    ) -> dict[str, Any]:
        """A webhook posting these events to `url`, signed per Standard Webhooks; the
        `secret` (made if not given) is in the answer, this once."""
        body: dict[str, Any] = {"url": url, "events": list(events)}
        if secret is not None:
            body["secret"] = secret
        return self._json("POST", f"/projects/{project_id}/webhooks", json=body)

    def deliveries(self, project_id: int, webhook_id: int) -> pd.DataFrame:
        """A webhook's delivery log, newest first: each message, attempts, last outcome."""
        path = f"/projects/{project_id}/webhooks/{webhook_id}/deliveries"
        return pd.DataFrame(self._json("GET", path))

    # Exports, as DataFrames -------------------------------------------------------

    def answers(self, project_id: int, **filters: str) -> pd.DataFrame:
        """Every answer (triplet) of the project, oldest first; `filters` are the export's
        own (source="rater", rater="...", raters="kept"). The columns and types are the
        README's "Parquet exports" table."""
        return self._parquet(f"/projects/{project_id}/triplets/export", filters)

    def judgements(self, project_id: int) -> pd.DataFrame:
        """Every odd-one-out, rank and sorting screen as shown and answered."""
        return self._parquet(f"/projects/{project_id}/judgements/export", {})

    def items(self, project_id: int) -> pd.DataFrame:
        """The project's items: key, label, text, split, image and features."""
        return self._parquet(f"/projects/{project_id}/items/export", {})

    def embedding(self, project_id: int, model_id: int, version: int | None = None) -> pd.DataFrame:
        """A model's embedding (t-ETE, or DisDF's representation), indexed by item key: a
        column a dimension, and `answered` (whether the item had answers to place it)."""
        params = {} if version is None else {"version": str(version)}
        frame = self._parquet(f"/projects/{project_id}/models/{model_id}/embedding", params)
        return frame.set_index("key")

    # Models -----------------------------------------------------------------------

    def models(self, project_id: int) -> pd.DataFrame:
        return pd.DataFrame(self._json("GET", f"/projects/{project_id}/models"))

    def model(self, project_id: int, model_id: int) -> dict[str, Any]:
        """A model with its serving version and its newest one (status, progress)."""
        return self._json("GET", f"/projects/{project_id}/models/{model_id}")

    def create_model(
        self,
        project_id: int,
        kind: str,
        name: str | None = None,
        params: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> dict[str, Any]:
        """A model of `kind` (tete, tripletboost, smerf, disdf; comprf with build_id=...),
        which starts training at once; `settings` are the API's other fields
        (refit_growth, min_answers, auto_refit, arm, ...)."""
        body = {"name": name or kind, "kind": kind, "params": dict(params or {}), **settings}
        return self._json("POST", f"/projects/{project_id}/models", json=body)

    def train(self, project_id: int, model_id: int) -> dict[str, Any]:
        """Fit the model again now, on every answer so far: the new version, queued."""
        return self._json("POST", f"/projects/{project_id}/models/{model_id}/train")

    def wait_for_model(
        self,
        project_id: int,
        model_id: int,
        *,
        version: int | None = None,
        timeout: float = 600.0,
        poll: float = 1.0,
    ) -> dict[str, Any]:
        """Wait until the model serves a ready version (`version` or a newer one, if
        given), and return that version. Raises CloserError if the version waited for
        failed or was cancelled, and TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.model(project_id, model_id)
            serving, latest = found["serving"], found["latest"]
            if serving is not None and (version is None or serving["number"] >= version):
                return serving
            if latest is not None and latest["status"] in ("failed", "cancelled"):
                if version is None or latest["number"] >= version:
                    raise CloserError(409, latest["message"] or latest["status"], "wait_for_model")
            if time.monotonic() > deadline:
                state = "none" if latest is None else f"{latest['status']} {latest['progress']:.0%}"
                raise TimeoutError(
                    f"model {model_id} serves no version after {timeout} s ({state})"
                )
            time.sleep(poll)

    def predict(
        self,
        project_id: int,
        model_id: int,
        items: Sequence[str] = (),
        *,
        new_items: Iterable[Mapping[str, Any]] = (),
        version: int | None = None,
    ) -> pd.DataFrame | dict[str, Any]:
        """Labels for items of the project (by key) and new ones (`new_items`: their
        triplets against known items, or their features), a row each: key, label,
        probabilities, support, tied. A CompRF forest routes the items by asking raters
        instead: then the routing to poll is returned, as the API gives it."""
        body: dict[str, Any] = {"items": list(items) or None, "new_items": list(new_items) or None}
        if version is not None:
            body["version"] = version
        found = self._json("POST", f"/projects/{project_id}/models/{model_id}/predict", json=body)
        if "predictions" not in found:
            return found
        return pd.DataFrame(found["predictions"]).set_index("key")

    # The wire ---------------------------------------------------------------------

    def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        response = self._http.request(method, path, **options)
        if response.is_error:
            try:
                detail: Any = response.json()
            except ValueError:
                detail = response.text
            raise CloserError(response.status_code, detail, f"{method} {path}")
        return response

    def _json(self, method: str, path: str, **options: Any) -> Any:
        return self._request(method, path, **options).json()

    def _parquet(self, path: str, params: Mapping[str, str]) -> pd.DataFrame:
        response = self._request("GET", path, params={**params, "format": "parquet"})
        # Integer and boolean columns with nulls (an uploaded answer has no response time)
        # stay integers and booleans, with <NA>, rather than becoming floats.
        return pq.read_table(io.BytesIO(response.content)).to_pandas(types_mapper=_NULLABLE.get)

    def _upload(self, path: str, upload: Upload, filename: str | None, key: str | None):
        if isinstance(upload, pd.DataFrame):
            content, name = _csv_of(upload), filename or "upload.csv"
        elif isinstance(upload, bytes):
            content, name = upload, filename or "upload.csv"
        else:
            content, name = Path(upload).read_bytes(), filename or Path(upload).name
        headers = {"Idempotency-Key": key} if key else {}
        return self._json("POST", path, files={"file": (name, content)}, headers=headers)


def _csv_of(frame: pd.DataFrame) -> bytes:
    """A DataFrame as the upload's CSV; a features column of sequences becomes the
    space-separated numbers the CSV takes."""
    frame = frame.copy()
    if "features" in frame.columns:
        frame["features"] = [
            value if isinstance(value, str) else _features_text(value)
            for value in frame["features"]
        ]
    return frame.to_csv(index=False).encode()


def _features_text(value: Any) -> str | None:
    """A row's features as the CSV takes them; None or NaN (pandas' missing) is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return " ".join(str(float(number)) for number in value)


# The name the client was first released under (stop 65).
Closer = Client
