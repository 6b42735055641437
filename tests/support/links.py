"""A study's link opens once its items are in (a new study's link is closed)."""

from __future__ import annotations

API = "/api/v1"


def open_link(client, headers: dict, project_id: int, server: str = "") -> dict:
    """Open the study link through the API, as a researcher does before sharing it
    (`client`: a TestClient, or httpx with the `server`'s address)."""
    response = client.put(
        f"{server}{API}/projects/{project_id}/link", headers=headers, json={"state": "open"}
    )
    assert response.status_code == 200, response.text
    return response.json()
