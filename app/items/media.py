"""Items that play: sounds and videos, recognised by their content (never by their name)
and timed on upload. mutagen reads the audio formats' and MP4's headers (pure Python:
nothing native parses an upload); WebM's EBML header is read here, as mutagen has no
Matroska reader. A file a browser could not play, or whose length cannot be read, is
refused with the reason."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from mutagen import MutagenError
from mutagen.aac import AAC
from mutagen.flac import FLAC
from mutagen.mp3 import MP3
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus
from mutagen.oggvorbis import OggVorbis
from mutagen.wave import WAVE

# The kinds of item file that play (kind_of: the first part of the file's type).
AUDIO, VIDEO = "audio", "video"
LONGEST_SECONDS = 600.0  # a clip raters compare is seconds long, not a film


class NotPlayable(ValueError):
    pass


@dataclass(frozen=True)
class Clip:
    extension: str
    content_type: str
    seconds: float


def kind_of(content_type: str | None) -> str | None:
    """ "image", "audio" or "video" for an item's file type; None without a file."""
    if not content_type:
        return None
    return content_type.split("/", 1)[0] if "/" in content_type else None


def looks_playable(head: bytes) -> bool:
    """Whether the file's first bytes are those of a sound or video (not an image)."""
    return _sniff(head) is not None


def inspect_clip(data: bytes) -> Clip:
    """The clip's type and length, or NotPlayable saying why."""
    found = _sniff(data[:4096])
    if found is None:
        raise NotPlayable(
            "not a sound or video this service plays (MP3, Ogg Opus or Vorbis, WAV, M4A/AAC, "
            "FLAC, MP4 (H.264) or WebM)"
        )
    extension, content_type = found
    if extension == "webm":
        seconds, has_video = _webm(data)
        content_type = "video/webm" if has_video else "audio/webm"
    else:
        reader = _READERS[extension]
        try:
            info = reader(io.BytesIO(data)).info
            seconds = float(info.length) if info is not None else 0.0
        except (MutagenError, struct.error, ValueError, IndexError, KeyError) as exc:
            raise NotPlayable(f"a damaged {extension.upper()} file ({exc})") from None
        if extension == "mp4" and _mp4_has_video(data):
            content_type = "video/mp4"
    if not seconds > 0:
        raise NotPlayable(f"its length could not be read from the {extension.upper()} header")
    if seconds > LONGEST_SECONDS:
        raise NotPlayable(
            f"{seconds:,.0f} s long; a clip may last at most {LONGEST_SECONDS:,.0f} s"
        )
    return Clip(extension, content_type, round(seconds, 3))


_READERS = {
    "mp3": MP3,
    "opus": OggOpus,
    "ogg": OggVorbis,
    "wav": WAVE,
    "mp4": MP4,
    "aac": AAC,
    "flac": FLAC,
}


def _sniff(head: bytes) -> tuple[str, str] | None:
    if head[:4] == b"OggS":
        if b"OpusHead" in head[:512]:
            return "opus", "audio/ogg"
        if b"\x01vorbis" in head[:512]:
            return "ogg", "audio/ogg"
        return None  # Theora and the rest: no browser plays them
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav", "audio/wav"
    if head[4:8] == b"ftyp":
        return "mp4", "audio/mp4"  # video/mp4 once a video track is found
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return ("webm", "video/webm") if b"webm" in head[:64] else None
    if head[:4] == b"fLaC":
        return "flac", "audio/flac"
    if head[:3] == b"ID3":
        return "mp3", "audio/mpeg"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        # An MPEG audio frame: layer bits 00 are AAC's ADTS, the others MP3's layers.
        return ("aac", "audio/aac") if head[1] & 0x06 == 0 else ("mp3", "audio/mpeg")
    return None


def _boxes(data: bytes, start: int, end: int):
    """ISO base media boxes between `start` and `end`: (type, payload start, box end)."""
    at = start
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        header = 8
        if size == 1 and at + 16 <= end:
            size = struct.unpack(">Q", data[at + 8 : at + 16])[0]
            header = 16
        elif size == 0:
            size = end - at
        if size < header or at + size > end:
            return
        yield kind, at + header, at + size
        at += size


def _mp4_has_video(data: bytes) -> bool:
    """Whether an MP4's movie holds a video track (a handler of type 'vide')."""
    for kind, start, end in _boxes(data, 0, len(data)):
        if kind != b"moov":
            continue
        for track, track_start, track_end in _boxes(data, start, end):
            if track != b"trak":
                continue
            for media, media_start, media_end in _boxes(data, track_start, track_end):
                if media != b"mdia":
                    continue
                for handler, handler_start, _ in _boxes(data, media_start, media_end):
                    if (
                        handler == b"hdlr"
                        and data[handler_start + 8 : handler_start + 12] == b"vide"
                    ):
                        return True
    return False


# WebM's EBML elements read here (Matroska's numbering).
_SEGMENT, _INFO, _TIMECODE_SCALE, _DURATION = 0x18538067, 0x1549A966, 0x2AD7B1, 0x4489
_TRACKS, _TRACK_ENTRY, _TRACK_TYPE, _CLUSTER = 0x1654AE6B, 0xAE, 0x83, 0x1F43B675
_CLUSTER_TIMECODE, _SIMPLE_BLOCK, _BLOCK_GROUP, _BLOCK = 0xE7, 0xA3, 0xA0, 0xA1
_MASTERS = frozenset({_SEGMENT, _INFO, _TRACKS, _TRACK_ENTRY, _CLUSTER, _BLOCK_GROUP})
_UNKNOWN = -1


def _vint(data: bytes, at: int, keep_marker: bool) -> tuple[int, int]:
    """An EBML variable-length integer at `at`: (value, where the next starts)."""
    if at >= len(data):
        raise NotPlayable("a truncated WebM file")
    first = data[at]
    length = 1
    while length <= 8 and not first & (0x80 >> (length - 1)):
        length += 1
    if length > 8 or at + length > len(data):
        raise NotPlayable("a damaged WebM file (a malformed element)")
    value = first if keep_marker else first & (0xFF >> length)
    for byte in data[at + 1 : at + length]:
        value = (value << 8) | byte
    if not keep_marker and value == (1 << (7 * length)) - 1:
        value = _UNKNOWN  # a live recording's segment and clusters: their size is unknown
    return value, at + length


def _walk(data: bytes, start: int, end: int, depth: int = 0):
    """Every EBML element between `start` and `end`, depth first: (id, payload start,
    payload end). A master element of unknown size (a live recording's segment or
    cluster) holds the rest of its parent: its walk reads it, siblings included."""
    at = start
    while at < end:
        element, at = _vint(data, at, keep_marker=True)
        size, at = _vint(data, at, keep_marker=False)
        stop = end if size == _UNKNOWN else min(at + size, end)
        yield element, at, stop
        if element in _MASTERS and depth < 8:
            yield from _walk(data, at, stop, depth + 1)
        if size == _UNKNOWN:
            return
        at = stop


def _uint(data: bytes, start: int, end: int) -> int:
    return int.from_bytes(data[start:end], "big")


def _webm(data: bytes) -> tuple[float, bool]:
    """A WebM file's length in seconds (its header's, else its last block's time) and
    whether it holds a video track."""
    scale, duration, has_video, last_ms, cluster_ms = 1_000_000, 0.0, False, 0, 0
    for element, start, end in _walk(data, 0, len(data)):
        if element == _TIMECODE_SCALE:
            scale = _uint(data, start, end) or scale
        elif element == _DURATION and end - start in (4, 8):
            duration = struct.unpack(">f" if end - start == 4 else ">d", data[start:end])[0]
        elif element == _TRACK_TYPE and _uint(data, start, end) == 1:
            has_video = True
        elif element == _CLUSTER_TIMECODE:
            cluster_ms = _uint(data, start, end)
        elif element in (_SIMPLE_BLOCK, _BLOCK) and end - start >= 4:
            _, after_track = _vint(data, start, keep_marker=False)
            relative = struct.unpack(">h", data[after_track : after_track + 2])[0]
            last_ms = max(last_ms, cluster_ms + relative)
    seconds = (duration if duration > 0 else last_ms) * scale / 1e9
    return seconds, has_video
