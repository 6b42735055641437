"""Item files: images checked with Pillow (sounds and videos: app/items/media.py), stored
content-addressed per project on disk."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import warnings
from pathlib import Path

from PIL import Image, UnidentifiedImageError

_TYPES = {
    "PNG": ("png", "image/png"),
    "JPEG": ("jpg", "image/jpeg"),
    "GIF": ("gif", "image/gif"),
    "WEBP": ("webp", "image/webp"),
    "BMP": ("bmp", "image/bmp"),
}


class NotAnImage(ValueError):
    pass


def inspect_image(data: bytes, max_pixels: int) -> tuple[str, str]:
    """(file extension, MIME type) of a browser-displayable image, or NotAnImage saying why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                kind = image.format
                width, height = image.size
                image.verify()
    except (
        UnidentifiedImageError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ) as exc:
        raise NotAnImage(
            "not an image, sound or video this service takes (images: PNG, JPEG, GIF, WebP, BMP; "
            "sounds and videos: MP3, Ogg Opus or Vorbis, WAV, M4A/AAC, FLAC, MP4, WebM) "
            f"({exc.__class__.__name__})"
        ) from None
    except Exception as exc:  # Pillow raises many types for truncated or corrupt data
        raise NotAnImage(f"corrupt image: {exc}") from None
    if kind not in _TYPES:
        raise NotAnImage(f"{kind} images are not supported (use PNG, JPEG, GIF, WebP or BMP)")
    if width * height > max_pixels:
        raise NotAnImage(f"{width}x{height} pixels exceeds the limit of {max_pixels}")
    return _TYPES[kind]


class ImageStore:
    """Files under ``<media>/<project id>/<sha256>.<ext>``; a project's folder goes with it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, project_id: int, filename: str) -> Path:
        return self.root / str(project_id) / filename

    def put(self, project_id: int, data: bytes, extension: str) -> tuple[str, bool]:
        """Store the bytes; returns (file name, whether this call created the file)."""
        filename = f"{hashlib.sha256(data).hexdigest()}.{extension}"
        target = self.path(project_id, filename)
        if target.exists():
            return filename, False
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(f".{os.getpid()}.part")
        temporary.write_bytes(data)
        os.replace(temporary, target)
        return filename, True

    def usage(self, project_id: int) -> int:
        """The bytes a project's files take (each stored once, however many items show it)."""
        folder = self.root / str(project_id)
        if not folder.is_dir():
            return 0
        return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file())

    def remove(self, project_id: int, filenames: list[str]) -> None:
        for filename in filenames:
            self.path(project_id, filename).unlink(missing_ok=True)

    def remove_project(self, project_id: int) -> None:
        shutil.rmtree(self.root / str(project_id), ignore_errors=True)
