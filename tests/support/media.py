"""Sounds and videos of every type the service takes, made for the tests by PyAV
(FFmpeg's encoders): a tone, and for a video a few frames of changing grey."""

from __future__ import annotations

import fractions
import functools
import io
import random
import struct

import av
import numpy as np

# A clip of each kind: (container, audio codec, with video).
KINDS = {
    "mp3": ("mp3", "libmp3lame", False),
    "opus": ("ogg", "libopus", False),
    "wav": ("wav", "pcm_s16le", False),
    "m4a": ("ipod", "aac", False),
    "aac": ("adts", "aac", False),
    "flac": ("flac", "flac", False),
    "mp4": ("mp4", "aac", True),
    "webm": ("webm", "libopus", True),
    "weba": ("webm", "libopus", False),
}


@functools.cache
def clip(kind: str, seconds: float = 1.5, pitch: float = 440.0) -> bytes:
    container, codec, video = KINDS[kind]
    buffer = io.BytesIO()
    out = av.open(buffer, "w", format=container)
    rate = 48_000
    picture = None
    if video:
        picture = out.add_stream("libx264" if container == "mp4" else "libvpx", rate=25)
        picture.width, picture.height, picture.pix_fmt = 64, 48, "yuv420p"
    sound = out.add_stream(codec, rate=rate)  # (every stream before the first packet)
    if picture is not None:
        for number in range(int(25 * seconds)):
            grey = np.full((48, 64, 3), number * 5 % 255, np.uint8)
            for packet in picture.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")):
                out.mux(packet)
        for packet in picture.encode():
            out.mux(packet)
    size = sound.codec_context.frame_size or 1024
    form = sound.codec_context.format.name
    total = int(rate * seconds)
    for start in range(0, total, size):
        count = min(size, total - start)
        wave = 0.2 * np.sin(2 * np.pi * pitch * np.arange(start, start + count) / rate)
        samples = wave.reshape(1, -1)
        if form.startswith("s16"):
            samples = (samples * 32_767).astype(np.int16)
        elif form.startswith("s32"):
            samples = (samples * 2_147_483_647).astype(np.int32)
        else:
            samples = samples.astype(np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format=form, layout="mono")
        frame.sample_rate, frame.pts = rate, start
        frame.time_base = fractions.Fraction(1, rate)
        for packet in sound.encode(frame):
            out.mux(packet)
    for packet in sound.encode():
        out.mux(packet)
    out.close()
    return buffer.getvalue()


def noise_wav(seconds: float, rate: int = 2_000) -> bytes:
    """A WAV of 8-bit noise, written directly: a long one is quick to make, and a ZIP
    does not shrink it (nor take it for a ZIP bomb)."""
    data = random.Random(seconds).randbytes(int(seconds * rate))
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        *(b"RIFF", 36 + len(data), b"WAVE", b"fmt ", 16, 1, 1, rate, rate, 1, 8),
        *(b"data", len(data)),
    )
    return header + data
