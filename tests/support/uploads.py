"""Helpers to build upload files in tests."""

from __future__ import annotations

import io
import zipfile

from PIL import Image


def png(color=(200, 30, 30), size=(8, 8)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG")
    return buffer.getvalue()


def zip_bytes(entries: dict[str, bytes | str], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def upload(client, auth, project_id: int, kind: str, filename: str, content, **kwargs):
    return client.post(
        f"/api/v1/projects/{project_id}/{kind}",
        headers={**auth, **kwargs.pop("headers", {})},
        files={"file": (filename, content)},
        **kwargs,
    )


def messages(response) -> list[str]:
    return [entry["msg"] for entry in response.json()["detail"]]


def coloured_squares(count: int, size: int = 48, labels: list[str] | None = None) -> bytes:
    """An items archive of `count` squares of gradually changing colour, keys c0, c1, …,
    labelled where `labels` are given."""
    colours = [((20 + 9 * i) % 256, (220 - 7 * i) % 256, (70 * i) % 256) for i in range(count)]
    header = "key,image" + (",label" if labels else "")
    rows = [f"c{i},img/{i}.png" + (f",{labels[i]}" if labels else "") for i in range(count)]
    return zip_bytes(
        {
            "manifest.csv": "\n".join([header, *rows]),
            **{f"img/{i}.png": png(colour, (size, size)) for i, colour in enumerate(colours)},
        }
    )
