"""Live streams over real HTTP and WebSockets: `videogen serve` (embedded worker) streams the
built-in causal model (random weights are fine here) at 64x64, 16 fps; frames are served while
they are made, prompt switches go through the store to the worker and are recorded, and the
finished stream is an ordinary video."""

from __future__ import annotations

import io
import json
import time

import httpx
import pytest
from service_helpers import decode, sse_events, stream_presets, wait_done, wait_for
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

STREAM = {"prompt": "a red circle moving right", "model": "builtin-causal", "stream": True, "size": "64x64"}
RED, BLUE = STREAM["prompt"], "a blue square moving up"


@pytest.fixture(scope="module")
def server(tmp_path_factory, make_server, tiny_model):
    d = tmp_path_factory.mktemp("streams")
    (d / "config").mkdir()
    (d / "config" / "models.yaml").write_text(stream_presets(tiny_model))
    s = make_server(d / "data", d / "server.log", extra_env={"VIDEOGEN_CONFIG_DIR": str(d / "config")})
    yield s
    s.stop()


def create(client: httpx.Client, **fields) -> dict:
    r = client.post("/v1/videos", json={**STREAM, **fields})
    assert r.status_code == 200, r.text
    return r.json()


def mjpeg_parts(response: httpx.Response):
    """(X-Frame-Index, JPEG bytes, arrival time) of each part of a multipart/x-mixed-replace body."""
    buf = b""
    for data in response.iter_bytes():
        buf += data
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if not buf.startswith(b"--frame\r\n") or head_end < 0:
                break
            headers = dict(line.split(": ", 1) for line in buf[9:head_end].decode().split("\r\n"))
            start = head_end + 4
            end = start + int(headers["Content-Length"])
            if len(buf) < end + 2:
                break
            yield int(headers["X-Frame-Index"]), buf[start:end], time.monotonic()
            buf = buf[end + 2 :]
    assert buf == b"--frame--\r\n", buf[:40]


def ws(server, video_id: str, key: str | None = "key-alpha", query: str = ""):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = server.url.replace("http://", "ws://") + f"/v1/videos/{video_id}/stream/ws" + (f"?{query}" if query else "")
    return connect(url, additional_headers=headers, open_timeout=10, max_size=None)


def ws_refusal(server, video_id: str, **kw) -> tuple[int, dict]:
    with pytest.raises(InvalidStatus) as err, ws(server, video_id, **kw):
        pass
    return err.value.response.status_code, json.loads(err.value.response.body)


def jpeg_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()  # decodes the whole JPEG
    assert image.format == "JPEG"
    return image.size


def test_mjpeg_serves_every_frame_while_the_stream_is_made_and_the_result_is_a_normal_video(alpha, tmp_path):
    video = create(alpha, seconds=3)  # 48 frames: chunks of 1, 12, 12, 12, 11
    assert (video["status"], video["stream"]["frames_total"], video["stream"]["chunks_total"]) == ("queued", 48, 5)
    parts, at_first_frame = [], None
    with alpha.stream("GET", f"/v1/videos/{video['id']}/stream", params={"from": 0}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"] == "multipart/x-mixed-replace; boundary=frame"
        for index, jpeg, arrived in mjpeg_parts(r):
            if not parts:
                at_first_frame = alpha.get(f"/v1/videos/{video['id']}").json()
            parts.append((index, jpeg, arrived))
    assert at_first_frame["status"] == "in_progress" and at_first_frame["stream"]["frames_done"] < 48
    assert [i for i, _, _ in parts] == list(range(48))  # seconds * fps, each once, in order
    assert parts[-1][2] - parts[0][2] > 0.05  # delivered chunk by chunk, not at the end
    assert all(jpeg_size(jpeg) == (64, 64) for _, jpeg, _ in parts)

    done = wait_done(alpha, video["id"])
    assert (done["status"], done["progress"], done["stream"]["frames_done"]) == ("completed", 100, 48)
    (tmp_path / "s.mp4").write_bytes(alpha.get(f"/v1/videos/{video['id']}/content").content)
    assert decode(tmp_path / "s.mp4").shape == (48, 64, 64, 3)
    assert alpha.get(f"/v1/videos/{video['id']}/content", params={"variant": "thumbnail"}).content.startswith(
        b"\x89PNG"
    )
    progress = [d for k, d in sse_events(alpha, video["id"]) if k == "progress"]  # one event per chunk
    assert [(d["chunk"], d["first_frame"], d["frames"]) for d in progress] == [(0, 0, 1), (1, 1, 12), (2, 13, 12),
                                                                               (3, 25, 12), (4, 37, 11)]  # fmt: skip
    assert [d["progress"] for d in progress] == [2, 27, 52, 77, 99]  # frames done / 48


def test_a_prompt_switched_over_the_websocket_changes_later_chunks_and_is_recorded(alpha, server, tmp_path):
    video = create(alpha, seconds=4)  # 64 frames in 7 chunks
    frames, messages = [], []
    with ws(server, video["id"], query="from=0") as sock:
        assert json.loads(sock.recv(timeout=30))["type"] == "status"
        while True:
            message = sock.recv(timeout=60)
            if isinstance(message, bytes):
                frames.append(message)
                continue
            message = json.loads(message)
            messages.append(message)
            if message["type"] == "chunk" and message["index"] == 0:
                sock.send(json.dumps({"type": "prompt", "prompt": BLUE}))
            if message["type"] == "end":
                break
    assert {"type": "prompt_requested", "prompt": BLUE} in messages
    assert messages[-1] == {"type": "end", "status": "completed", "frames": 64}
    chunks = [m for m in messages if m["type"] == "chunk"]
    prompts = [c["prompt"] for c in chunks]
    k = prompts.index(BLUE)  # the next chunk boundary the worker reached after the switch
    assert 1 <= k < len(chunks) and prompts == [RED] * k + [BLUE] * (len(chunks) - k)
    assert len(frames) == sum(c["frames"] for c in chunks) == 64 and jpeg_size(frames[-1]) == (64, 64)

    done = wait_done(alpha, video["id"])
    switch = {
        "at_seconds": chunks[k]["first_frame"] / 16,
        "frame": chunks[k]["first_frame"],
        "chunk": k,
        "prompt": BLUE,
    }
    assert done["stream"]["prompt_switches"] == [switch] and done["stream"]["prompt"] == BLUE
    assert done["prompt"] == RED  # what it was created with
    assert [d for kind, d in sse_events(alpha, video["id"]) if kind == "prompt"] == [{"id": video["id"], **switch}]
    (tmp_path / "w.mp4").write_bytes(alpha.get(f"/v1/videos/{video['id']}/content").content)
    assert decode(tmp_path / "w.mp4").shape == (64, 64, 64, 3)


def test_cancel_over_the_websocket_stops_the_stream(alpha, server):
    video = create(alpha, seconds=60)  # 960 frames: far longer than the test
    with ws(
        server, video["id"], query="api_key=key-alpha&from=0", key=None
    ) as sock:  # the browser's way to authenticate
        while not isinstance(sock.recv(timeout=60), bytes):  # the first frame
            pass
        sock.send(json.dumps({"type": "cancel"}))
        replies = []
        while not replies or replies[-1]["type"] != "end":
            message = sock.recv(timeout=30)
            if isinstance(message, str):
                replies.append(json.loads(message))
    assert {"type": "cancel_requested", "status": "in_progress"} in replies
    assert replies[-1]["type"] == "end" and replies[-1]["status"] == "cancelled" and replies[-1]["frames"] < 960
    done = wait_done(alpha, video["id"], timeout=10)
    assert done["status"] == "cancelled" and done["stream"]["frames_done"] < 960
    assert alpha.get(f"/v1/videos/{video['id']}/content").status_code == 404
    assert not (server.data_dir / "streams" / video["id"]).exists()  # the spool went with the job
    r = alpha.post(f"/v1/videos/{video['id']}/prompt", json={"prompt": BLUE})
    assert r.status_code == 409 and r.json()["error"]["code"] == "stream_ended"


def test_a_prompt_switch_over_http_is_applied_by_the_worker(alpha):
    video = create(alpha, seconds=60)
    wait_for(alpha, video["id"], lambda v: v["stream"]["frames_done"] > 0)
    r = alpha.post(f"/v1/videos/{video['id']}/prompt", json={"prompt": BLUE})
    assert r.status_code == 200, r.text
    assert r.json() == {"object": "video.prompt_switch", "video_id": video["id"], "prompt": BLUE, "status": "requested"}
    switched = wait_for(alpha, video["id"], lambda v: v["stream"]["prompt_switches"], timeout=30)
    switch = switched["stream"]["prompt_switches"][0]
    assert switch["prompt"] == BLUE and switch["frame"] > 0 and switch["at_seconds"] == switch["frame"] / 16
    alpha.post(f"/v1/videos/{video['id']}/cancel")
    assert wait_done(alpha, video["id"], timeout=10)["status"] == "cancelled"


def test_another_tenant_gets_404_and_a_missing_key_401(alpha, beta, server):
    video = create(alpha, seconds=1)
    vid = video["id"]
    for method, path, body in [("GET", f"/v1/videos/{vid}/stream", None),
                               ("POST", f"/v1/videos/{vid}/prompt", {"prompt": BLUE})]:  # fmt: skip
        r = beta.request(method, path, json=body)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (method, path, r.text)
    assert ws_refusal(server, vid, key="key-beta")[0] == 404
    assert ws_refusal(server, vid, key=None, query="api_key=key-beta")[0] == 404
    status, body = ws_refusal(server, vid, key=None)
    assert status == 401 and body["error"]["code"] == "missing_api_key"
    assert httpx.get(f"{server.url}/v1/videos/{vid}/stream").status_code == 401
    assert wait_done(alpha, vid)["status"] == "completed"
    # A finished stream replays from its spool for a while (?from=0; the key as a query parameter for an <img>)...
    r = httpx.get(f"{server.url}/v1/videos/{vid}/stream", params={"from": 0, "api_key": "key-alpha"}, timeout=30)
    assert r.status_code == 200 and r.content.count(b"Content-Type: image/jpeg") == 16
    r = alpha.get(f"/v1/videos/{vid}/stream")  # ...but there is nothing live to follow any more
    assert r.status_code == 409 and r.json()["error"]["code"] == "stream_ended"
    r = alpha.post(f"/v1/videos/{vid}/prompt", json={"prompt": BLUE})
    assert r.status_code == 409 and "completed" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "tiny", "seconds": 1}, "model"),  # not block-causal
        ({"seconds": None}, "seconds"),  # a stored stream needs a length
        ({"seconds": 1.01}, "seconds"),  # 16.16 frames at 16 fps
        ({"seconds": 1, "size": "60x64"}, "size"),  # not a multiple of 8
        ({"seconds": 1, "steps": 0}, "steps"),
        ({"seconds": 1, "prompt": "  "}, "prompt"),
        ({"seconds": 1, "shots": [{"prompt": "a", "seconds": 1}]}, "shots"),
        ({"seconds": 1, "stream": "maybe"}, "stream"),
    ],
)
def test_bad_stream_requests_are_a_400_naming_the_parameter(alpha, body, param):
    r = alpha.post("/v1/videos", json={k: v for k, v in {**STREAM, **body}.items() if v is not None})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["type"], r.json()["error"]["param"]) == ("invalid_request_error", param)


def test_stream_requests_on_a_video_that_is_not_a_stream_or_with_bad_values_are_named(alpha, server):
    plain = alpha.post(
        "/v1/videos", json={"prompt": "a red circle", "model": "tiny", "seconds": "2", "size": "32x32"}
    ).json()
    assert plain["stream"] is None
    for r in (
        alpha.get(f"/v1/videos/{plain['id']}/stream"),
        alpha.post(f"/v1/videos/{plain['id']}/prompt", json={"prompt": BLUE}),
    ):
        error = r.json()["error"]
        assert r.status_code == 400 and (error["param"], error["code"]) == ("video_id", "not_a_stream")
        assert plain["id"] in error["message"]
    assert ws_refusal(server, plain["id"])[0] == 400

    r = alpha.post("/v1/videos", data={"prompt": RED, "model": "builtin-causal", "stream": "true", "seconds": "60"})
    assert r.status_code == 200 and r.json()["stream"]["frames_total"] == 960  # multipart works like JSON
    vid = r.json()["id"]
    for body in ({"prompt": ""}, {"prompt": "   "}, {}):
        r = alpha.post(f"/v1/videos/{vid}/prompt", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
    r = alpha.get(f"/v1/videos/{vid}/stream", params={"from": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "from"
    with ws(server, vid) as sock:
        assert json.loads(sock.recv(timeout=30))["type"] == "status"
        sock.send(json.dumps({"type": "prompt", "prompt": ""}))
        sock.send("not json")
        sock.send(json.dumps({"type": "pause"}))
        errors = []
        while len(errors) < 3:
            message = sock.recv(timeout=30)
            if isinstance(message, str) and json.loads(message)["type"] == "error":
                errors.append(json.loads(message)["error"]["param"])
        assert errors == ["prompt", "type", "type"]
    alpha.post(f"/v1/videos/{vid}/cancel")
    assert wait_done(alpha, vid, timeout=30)["status"] == "cancelled"
    assert wait_done(alpha, plain["id"])["status"] == "completed"
