"""Hostile input over real HTTP (`videogen serve`, embedded mode): oversized bodies whatever the
transfer encoding, over-long and NUL-laden text, numbers too large for any field, JSON nested
too deeply, malformed `Last-Event-ID`, wrong methods, and the OpenAPI document the server serves.
Every refusal is a 4xx in OpenAI's error shape naming the field; nothing is stored."""

from __future__ import annotations

import json

import httpx
import pytest
from service_helpers import wait_done

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAST = {"model": "tiny", "seconds": "2", "size": "32x32"}
MAX_PROMPT = 300  # VIDEOGEN_MAX_PROMPT_CHARS of the module's server


@pytest.fixture(scope="module")
def server(tmp_path_factory, make_server):
    d = tmp_path_factory.mktemp("hostile")
    s = make_server(d / "data", d / "server.log", {"VIDEOGEN_MAX_PROMPT_CHARS": str(MAX_PROMPT)})
    yield s
    s.stop()


def job_count(client: httpx.Client) -> int:
    return len(client.get("/v1/videos?limit=100").json()["data"])


def assert_error(r: httpx.Response, status: int, param: str | None) -> dict:
    assert r.status_code == status, r.text[:500]
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    return error


def test_a_chunked_body_over_the_limit_is_413_and_nothing_is_stored(alpha, server):
    before = job_count(alpha)

    def body():  # no Content-Length: httpx sends an iterator with Transfer-Encoding: chunked
        yield b'{"model": "tiny", "prompt": "'
        for _ in range(64):
            yield b"a" * 16384  # 1 MiB in all; the server's limit is 64 KiB + 64 KiB of form overhead
        yield b'"}'

    r = alpha.post("/v1/videos", content=body(), headers={"Content-Type": "application/json"})
    error = assert_error(r, 413, None)
    assert error["code"] == "payload_too_large"
    assert job_count(alpha) == before
    # Same for a declared length, and for a chunked multipart upload
    r = alpha.post("/v1/videos", content=b"{" + b" " * 200_000 + b"}", headers={"Content-Type": "application/json"})
    assert_error(r, 413, None)
    head = (
        b'--xyz\r\nContent-Disposition: form-data; name="prompt"\r\n\r\na cat\r\n--xyz\r\nContent-Disposition: '
        b'form-data; name="input_reference"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n'
    )
    parts = [head, *[b"0" * 16384] * 20, b"\r\n--xyz--\r\n"]  # a 320 KiB image, chunked
    r = alpha.post("/v1/videos", content=iter(parts), headers={"Content-Type": "multipart/form-data; boundary=xyz"})
    assert_error(r, 413, "input_reference")
    assert job_count(alpha) == before


@pytest.mark.parametrize("field", ["prompt", "negative_prompt", "shots.0.prompt"])
def test_text_longer_than_the_limit_is_a_400_naming_the_field(alpha, field):
    long = "a cat " * MAX_PROMPT
    body = {"model": "tiny", "prompt": "a cat", **FAST}
    if field == "shots.0.prompt":
        body.pop("seconds")
        body["shots"] = [{"prompt": long, "seconds": 1}]
    else:
        body[field] = long
    error = assert_error(alpha.post("/v1/videos", json=body), 400, field)
    assert str(MAX_PROMPT) in error["message"] and len(error["message"]) < 300  # the value is not echoed whole
    ok = alpha.post("/v1/videos", json={"prompt": "x" * MAX_PROMPT, **FAST})  # at the limit: accepted
    assert ok.status_code == 200, ok.text
    alpha.post(f"/v1/videos/{ok.json()['id']}/cancel")


def test_an_extension_and_a_prompt_switch_check_their_prompt_too(alpha):
    long = "y" * (MAX_PROMPT + 1)
    vid = "video_" + "0" * 32
    r = alpha.post("/v1/videos/extensions", json={"prompt": long, "seconds": 1, "video": {"id": vid}})
    assert_error(r, 400, "prompt")
    assert_error(alpha.post(f"/v1/videos/{vid}/prompt", json={"prompt": long}), 400, "prompt")


def test_a_nul_character_is_a_400_on_every_store(db_url, serve):  # db_url: SQLite, then PostgreSQL
    s = serve(extra_env={"DATABASE_URL": db_url})
    with s.client() as c:
        assert_error(c.post("/v1/videos", json={"prompt": "a\x00cat", **FAST}), 400, "prompt")
        assert_error(c.post("/v1/videos", json={"prompt": "cat", "negative_prompt": "\x00", **FAST}), 400,
                     "negative_prompt")  # fmt: skip
        assert_error(c.post("/v1/videos", data={"prompt": "a\x00cat", **FAST}), 400, "prompt")  # multipart
        assert_error(c.get("/v1/videos", params={"after": "video_\x00"}), 400, "after")
        assert_error(c.get("/v1/videos", params={"after": "x" * 5000}), 400, "after")
        assert c.get("/v1/videos").json()["data"] == []


def test_numbers_too_large_for_any_field_are_a_400_naming_it(alpha):
    before = job_count(alpha)
    raw = '{"prompt": "a cat", "model": "tiny", "seed": ' + "9" * 5000 + "}"
    assert_error(alpha.post("/v1/videos", content=raw, headers={"Content-Type": "application/json"}), 400, "seed")
    assert_error(alpha.post("/v1/videos", json={"prompt": "a cat", **FAST, "seed": 2**64}), 400, "seed")
    assert_error(alpha.post("/v1/videos", json={"prompt": "a cat", **FAST, "seed": -1}), 400, "seed")
    assert_error(alpha.post("/v1/videos", data={"prompt": "a cat", **FAST, "seed": "9" * 5000}), 400, "seed")
    raw = '{"prompt": "a cat", "model": "tiny", "seconds": 1e999}'
    assert_error(alpha.post("/v1/videos", content=raw, headers={"Content-Type": "application/json"}), 400, "seconds")
    assert job_count(alpha) == before


def test_json_nested_too_deeply_is_a_400(alpha):
    for depth in (50, 30_000):
        raw = '{"prompt": "a cat", "drift_correction": {"x": ' + "[" * depth + "]" * depth + "}}"
        r = alpha.post("/v1/videos", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (depth, r.text[:500])
        assert r.json()["error"]["code"] == "invalid_json" or r.json()["error"]["param"].startswith("drift_correction")


def event_ids(client: httpx.Client, video_id: str, headers: dict[str, str]) -> list[int]:
    with client.stream("GET", f"/v1/videos/{video_id}/events", headers=headers) as r:
        assert r.status_code == 200
        return [int(line[4:]) for line in r.iter_lines() if line.startswith("id: ")]


def test_a_last_event_id_out_of_range_is_a_400(alpha):
    video = alpha.post("/v1/videos", json={"prompt": "a cat", **FAST}).json()
    for bad in ("99999999999999999999999", str(2**63), "-1", "abc"):
        r = alpha.get(f"/v1/videos/{video['id']}/events", headers={"Last-Event-ID": bad})
        assert_error(r, 400, "Last-Event-ID")
    ids = event_ids(alpha, video["id"], {})  # the whole stream, to the terminal status
    assert event_ids(alpha, video["id"], {"Last-Event-ID": str(ids[0])}) == ids[1:]  # resumes after the first
    assert event_ids(alpha, video["id"], {"Last-Event-ID": str(2**63 - 1)}) == []  # nothing after the last id


def test_a_wrong_method_is_405_with_allow_in_the_error_shape(alpha):
    r = alpha.put("/v1/videos")
    error = assert_error(r, 405, None)
    assert error["code"] == "method_not_allowed"
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


def test_the_openapi_document_describes_what_the_server_answers(server):
    doc = httpx.get(server.url + "/openapi.json").json()
    ops = {(path, method): op for path, item in doc["paths"].items() for method, op in item.items()}
    for (path, method), op in ops.items():
        assert "422" not in op["responses"], (path, method)
        if path.startswith("/v1/"):
            assert {"400", "401"} <= set(op["responses"]), (path, method)
            error = op["responses"]["401"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorResponse"}
    create = ops[("/v1/videos", "post")]
    assert {"413", "429"} <= set(create["responses"])
    body = create["requestBody"]["content"]
    assert set(body) == {"application/json", "multipart/form-data"}
    json_schema = doc["components"]["schemas"][body["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]
    assert json_schema["properties"]["prompt"]["anyOf"][0]["maxLength"] == MAX_PROMPT
    form = body["multipart/form-data"]["schema"]
    assert form["properties"]["input_reference"] == {"type": "string", "format": "binary"}
    for path in ("/v1/videos/extensions", "/v1/videos/{video_id}/prompt"):
        assert "application/json" in ops[(path, "post")]["requestBody"]["content"]
    content = ops[("/v1/videos/{video_id}/content", "get")]["responses"]["200"]["content"]
    assert {"video/mp4", "image/png"} <= set(content)
    assert "application/json" not in ops[("/v1/videos/{video_id}/events", "get")]["responses"]["200"]["content"]
    assert "text/event-stream" in ops[("/v1/videos/{video_id}/events", "get")]["responses"]["200"]["content"]
    assert json.dumps(doc)  # serialisable as served


BUILTIN_PRESET = """\
default: builtin
presets:
  builtin:
    kind: builtin
    weights: builtin.safetensors
    size: 32x32
    fps: 8
    steps: 1
    guidance: 1.0
    flow_shift: 3.0
    segment_seconds: 1.0
    overlap_frames: 1
    attention: dense
"""


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_huge_prompt_logs_short_lines_with_the_job_and_tenant(fmt, serve, tmp_path):
    """The built-in model warns about every word it does not know, quoting them: with a 1 MB
    prompt that was one 1.4 MB line with no job id."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "models.yaml").write_text(BUILTIN_PRESET)
    env = {"VIDEOGEN_CONFIG_DIR": str(tmp_path / "config"), "VIDEOGEN_MAX_PROMPT_CHARS": "300000",
           "VIDEOGEN_MAX_UPLOAD_BYTES": "400000"}  # fmt: skip
    s = serve(extra_env=env, args=["--log-format", "json"] if fmt == "json" else [])
    with s.client() as c:
        r = c.post("/v1/videos", json={"prompt": "a red circle " + "zzq " * 50_000, "seconds": 1})
        assert r.status_code == 200, r.text[:500]
        vid = r.json()["id"]
        assert wait_done(c, vid, timeout=120)["status"] == "completed"
    lines = [line for line in s.output().splitlines() if line.strip()]
    assert max(len(line) for line in lines) < 5000
    warned = [line for line in lines if "vocabulary" in line]
    assert warned and all("more chars]" in line for line in warned)
    if fmt == "text":
        assert all(f"[job={vid} tenant=alpha]" in line for line in warned)
        return
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message", "job_id", "tenant"} <= set(rec) for rec in records)
    assert all((rec["job_id"], rec["tenant"]) == (vid, "alpha") for rec in records if "vocabulary" in rec["message"])
