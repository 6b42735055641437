"""Items that play: sounds and videos in the items ZIP, recognised by their content and
timed on upload, refused whole with the row at fault, and served to raters with range
requests under the same rules as images."""

from __future__ import annotations

import pytest

from app.items.media import inspect_clip
from tests.support.links import open_link
from tests.support.media import KINDS, clip, noise_wav
from tests.support.uploads import messages, png, upload, zip_bytes

API = "/api/v1"


def _items(client, auth, project_id) -> dict:
    listed = client.get(f"{API}/projects/{project_id}/items?limit=100", headers=auth).json()
    return {item["key"]: item for item in listed["items"]}


def _media_files(settings, project_id) -> list:
    folder = settings.media_dir / str(project_id)
    return sorted(folder.iterdir()) if folder.exists() else []


def test_every_common_sound_and_video_is_taken_by_its_content_and_timed(
    client, auth, project, settings
):
    # Names say nothing: a WAV called .png is a sound, a PNG called .mp3 an image.
    entries = {f"clips/{kind}.bin": clip(kind) for kind in KINDS}
    entries["clips/looks-like-an-image.png"] = clip("wav")
    entries["clips/looks-like-a-sound.mp3"] = png()
    rows = [f"{kind},{kind} clip,clips/{kind}.bin" for kind in KINDS]
    rows += [
        "disguised-wav,,clips/looks-like-an-image.png",
        "disguised-png,,clips/looks-like-a-sound.mp3",
    ]
    entries["manifest.csv"] = "key,text,image\n" + "\n".join(rows)
    response = upload(client, auth, project["id"], "items", "clips.zip", zip_bytes(entries))
    assert response.status_code == 201, response.text

    items = _items(client, auth, project["id"])
    expected = {
        "mp3": "audio/mpeg",
        "opus": "audio/ogg",
        "wav": "audio/wav",
        "m4a": "audio/mp4",
        "aac": "audio/aac",
        "flac": "audio/flac",
        "mp4": "video/mp4",
        "webm": "video/webm",
        "weba": "audio/webm",
        "disguised-wav": "audio/wav",
        "disguised-png": "image/png",
    }
    assert {key: item["media_type"] for key, item in items.items()} == expected
    for kind in KINDS:
        assert items[kind]["clip_seconds"] == pytest.approx(1.5, abs=0.05), kind
    assert items["disguised-png"]["clip_seconds"] is None
    # The researcher's file route serves each with its type, in ranges.
    served = client.get(items["mp4"]["image_url"], headers={**auth, "Range": "bytes=0-99"})
    assert served.status_code == 206 and len(served.content) == 100
    assert served.headers["content-type"] == "video/mp4"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (b"ID3 but nothing more than a tag header", "a damaged MP3 file"),
        (
            b"OggS\x00\x02" + b"\x00" * 40 + b"\x80theora",
            "not an image",
        ),  # Theora: no browser plays it
        (clip("mp4")[:2000], "a damaged MP4 file"),
        (noise_wav(601), "601 s long; a clip may last at most 600 s"),
        (b"just some text, not a clip", "not an image"),
    ],
)
def test_a_bad_clip_is_refused_naming_its_row_and_nothing_is_stored(
    client, auth, project, settings, entry, problem
):
    entries = {
        "manifest.csv": "key,image\ngood,good.wav\nbad,bad.mp3\n",
        "good.wav": clip("wav"),
        "bad.mp3": entry,
    }
    response = upload(client, auth, project["id"], "items", "clips.zip", zip_bytes(entries))
    assert response.status_code == 422, response.text
    said = messages(response)
    assert len(said) == 1 and said[0].startswith("clips.zip:bad.mp3: ")
    assert problem in said[0] and "(row 3 of the manifest)" in said[0]
    assert _items(client, auth, project["id"]) == {}
    assert _media_files(settings, project["id"]) == []


def test_a_clip_over_its_limit_or_the_project_budget_is_refused(client, auth, project, settings):
    settings.max_clip_bytes = 100_000  # the WAV (288 kB) is over it, the MP3 (25 kB) not
    entries = {
        "manifest.csv": "key,image\nsmall,a.mp3\nlarge,b.wav\n",
        "a.mp3": clip("mp3"),
        "b.wav": clip("wav"),
    }
    refused = upload(client, auth, project["id"], "items", "clips.zip", zip_bytes(entries))
    assert refused.status_code == 422
    assert messages(refused) == [
        "clips.zip:b.wav: 288078 bytes unpacked; a sound or video may have at most 100000 "
        "(CLOSER_MAX_CLIP_BYTES) (row 3 of the manifest)"
    ]
    settings.max_clip_bytes = 1_000_000
    settings.max_project_media_bytes = 200_000  # the MP3 fits, the WAV after it does not
    over = upload(client, auth, project["id"], "items", "clips.zip", zip_bytes(entries))
    assert over.status_code == 422
    assert "the project's files would take more than 200000 bytes" in messages(over)[0]
    assert "(row 3 of the manifest)" in messages(over)[0]
    assert _items(client, auth, project["id"]) == {}
    assert _media_files(settings, project["id"]) == []


def test_raters_get_each_clip_with_its_length_in_ranges_as_browsers_ask(client, auth, project):
    entries = {
        "manifest.csv": "key,text,image\n"
        + "\n".join(f"tone-{n},tone {n},tone-{n}.ogg" for n in range(4)),
        **{f"tone-{n}.ogg": clip("opus", pitch=220.0 * (n + 1)) for n in range(4)},
    }
    assert (
        upload(client, auth, project["id"], "items", "tones.zip", zip_bytes(entries)).status_code
        == 201
    )
    slug = open_link(client, auth, project["id"])["public_slug"]
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": "listener"})
    token = {"X-Rater-Token": joined.json()["rater_token"]}
    comparison = client.get(f"{API}/rate/{slug}/next", headers=token).json()["comparison"]
    shown = comparison["anchor"]
    assert shown["image_url"] is None and shown["clip_type"] == "audio/ogg"
    assert shown["clip_seconds"] == pytest.approx(1.5, abs=0.01)
    whole = client.get(shown["clip_url"])
    assert whole.status_code == 200 and whole.headers["accept-ranges"] == "bytes"
    assert "max-age" in whole.headers["cache-control"]
    assert inspect_clip(whole.content).content_type == "audio/ogg"
    # A seek: the range asked, its place in the whole, nothing more.
    part = client.get(shown["clip_url"], headers={"Range": "bytes=1000-1999"})
    assert part.status_code == 206 and part.content == whole.content[1000:2000]
    assert part.headers["content-range"] == f"bytes 1000-1999/{len(whole.content)}"
    tail = client.get(shown["clip_url"], headers={"Range": "bytes=-500"})
    assert tail.status_code == 206 and tail.content == whole.content[-500:]
    beyond = client.get(shown["clip_url"], headers={"Range": f"bytes={len(whole.content) + 10}-"})
    assert beyond.status_code == 416
    # Another study's link does not serve it.
    other = client.post(f"{API}/projects", headers=auth, json={"name": "other"}).json()
    rows = "key\na\nb\nc"
    assert upload(client, auth, other["id"], "items", "o.csv", rows).status_code == 201
    other_slug = open_link(client, auth, other["id"])["public_slug"]
    stolen = shown["clip_url"].replace(slug, other_slug)
    assert client.get(stolen).status_code == 404


def test_the_items_export_carries_the_clips_and_uploads_again_as_it_was(client, auth, project):
    entries = {
        "manifest.csv": "key,text,image\nvoice,a voice,v.mp3\nscene,a scene,s.mp4\nbird,,b.flac\n",
        "v.mp3": clip("mp3"),
        "s.mp4": clip("mp4"),
        "b.flac": clip("flac"),
    }
    assert (
        upload(client, auth, project["id"], "items", "c.zip", zip_bytes(entries)).status_code == 201
    )
    exported = client.get(f"{API}/projects/{project['id']}/items/export?format=zip", headers=auth)
    assert exported.status_code == 200
    other = client.post(f"{API}/projects", headers=auth, json={"name": "copy"}).json()
    again = upload(client, auth, other["id"], "items", "export.zip", exported.content)
    assert again.status_code == 201, again.text
    before, after = _items(client, auth, project["id"]), _items(client, auth, other["id"])
    for key in ("voice", "scene", "bird"):
        assert after[key]["media_type"] == before[key]["media_type"]
        assert after[key]["clip_seconds"] == before[key]["clip_seconds"]
        assert (
            client.get(after[key]["image_url"], headers=auth).content
            == entries[{"voice": "v.mp3", "scene": "s.mp4", "bird": "b.flac"}[key]]
        )


def test_the_workspace_plays_the_clips_on_the_items_page_and_in_the_item_cards(
    client, auth, project
):
    entries = {
        "manifest.csv": "key,text,image\nvoice,a voice,v.mp3\nscene,a scene,s.webm\nred,,r.png\n",
        "v.mp3": clip("mp3"),
        "s.webm": clip("webm"),
        "r.png": png(),
    }
    assert (
        upload(client, auth, project["id"], "items", "c.zip", zip_bytes(entries)).status_code == 201
    )
    page = client.get(f"/projects/{project['id']}/items", headers=auth).text
    assert '<audio controls preload="none"' in page and 'aria-label="a voice"' in page
    assert '<video controls preload="metadata"' in page and "<img src=" in page
    cards = client.get(f"/projects/{project['id']}/item-cards.json", headers=auth).json()
    assert [cards[key][3] for key in ("voice", "scene", "red")] == ["audio", "video", "image"]


def test_an_alt_column_names_each_file_for_screen_readers(client, auth, project):
    entries = {
        "manifest.csv": "key,text,alt,image\n"
        "red,,a red square,r.png\nblue,blue,,b.png\ncall,,a bird's call,c.mp3\nplain,,,\n",
        "r.png": png((200, 0, 0)),
        "b.png": png((0, 0, 200)),
        "c.mp3": clip("mp3"),
    }
    assert (
        upload(client, auth, project["id"], "items", "a.zip", zip_bytes(entries)).status_code == 201
    )
    items = _items(client, auth, project["id"])
    assert items["red"]["alt"] == "a red square" and items["blue"]["alt"] is None
    exported = client.get(f"{API}/projects/{project['id']}/items/export?format=csv", headers=auth)
    assert exported.text.splitlines()[0] == "key,label,text,split,image,features,alt"
    assert ",a red square" in exported.text
    slug = open_link(client, auth, project["id"])["public_slug"]
    client.post(f"/r/{slug}/start", data={})
    said = set()
    for _ in range(12):  # the screens show every item sooner or later
        page = client.get(f"/r/{slug}/rate").text
        said |= {
            alt
            for alt in ("a red square", "a bird")
            if f'alt="{alt}' in page or f'aria-label="{alt}' in page
        }
        said |= {"blue"} if 'alt=""' in page and ">blue<" in page else set()
        query = page.split('name="query_id" value="')[1].split('"')[0]
        client.post(f"/r/{slug}/answer", data={"query_id": query, "choice": "left"})
    assert said == {"a red square", "a bird", "blue"}
    too_long = upload(client, auth, project["id"], "items", "b.csv", "key,alt\nlong," + "x" * 1001)
    assert too_long.status_code == 422 and "longer than 1000 characters" in messages(too_long)[0]


def test_plays_sent_with_an_answer_are_kept_once_and_in_the_participants_records(
    client, auth, project
):
    entries = {
        "manifest.csv": "key,image\n" + "\n".join(f"t{n},t{n}.ogg" for n in range(4)),
        **{f"t{n}.ogg": clip("opus", pitch=300.0 + 40 * n) for n in range(4)},
    }
    assert (
        upload(client, auth, project["id"], "items", "t.zip", zip_bytes(entries)).status_code == 201
    )
    slug = open_link(client, auth, project["id"])["public_slug"]
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": "ears"})
    token = {"X-Rater-Token": joined.json()["rater_token"]}
    shown = client.get(f"{API}/rate/{slug}/next", headers=token).json()["comparison"]
    keys = [shown[side]["key"] for side in ("anchor", "left", "right")]
    plays = {keys[0]: 1, keys[1]: 3, keys[2]: 1}
    body = {"query_id": shown["query_id"], "choice": "left", "plays": plays}
    bad = client.post(
        f"{API}/rate/{slug}/answers", headers=token, json={**body, "plays": {keys[0]: -1}}
    )
    assert bad.status_code == 422 and "plays" in bad.text
    assert client.post(f"{API}/rate/{slug}/answers", headers=token, json=body).status_code == 200
    again = {**body, "plays": {keys[0]: 9, keys[1]: 9, keys[2]: 9}}  # a retry: kept once
    assert client.post(f"{API}/rate/{slug}/answers", headers=token, json=again).json()["replayed"]
    records = client.get(
        f"{API}/projects/{project['id']}/participants/ears/records", headers=auth
    ).json()
    assert [screen["plays"] for screen in records["screens"]] == [plays]


def test_a_live_recordings_webm_is_timed_from_its_last_block():
    """A browser's MediaRecorder writes WebM with no duration in its header and a segment
    of unknown size: its length comes from its blocks' times."""
    recorded = bytearray(clip("weba"))
    duration = recorded.find(b"\x44\x89\x88")  # the header's Duration (an 8-byte float)
    recorded[duration : duration + 11] = b"\xec\x89" + bytes(9)  # made an EBML Void
    segment = recorded.find(b"\x18\x53\x80\x67")
    recorded[segment + 4 : segment + 12] = b"\x01" + b"\xff" * 7  # of unknown size
    found = inspect_clip(bytes(recorded))
    assert found.content_type == "audio/webm"
    assert found.seconds == pytest.approx(inspect_clip(clip("weba")).seconds, abs=0.02)
