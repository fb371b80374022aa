"""schemathesis (v4) against a real `videogen serve` (embedded mode, the tiny model) over HTTP,
driven by the OpenAPI document the server itself serves: valid and invalid requests, bodies
included, for every operation; no server error, and every answer as documented (status, media
type, headers, body schema).

Bounded for CI (a few examples per operation, about a minute on a 2-core box). A longer run:

    VIDEOGEN_FUZZ_EXAMPLES=300 python -m pytest -q tests/service/test_openapi_fuzz.py -s

Half the cases that name a video get one of the tenant's completed videos (the fuzzer's own ids
never exist), so `/content`, `/events`, `/cancel` and the stream routes answer with their success
responses too. Every job a case creates is cancelled at once: the embedded worker stays free.
"""

from __future__ import annotations

import os
import zlib

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from service_helpers import wait_done

MAX_EXAMPLES = int(os.environ.get("VIDEOGEN_FUZZ_EXAMPLES", "12"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, negative_data_rejection]  # fmt: skip
AUTH = {"Authorization": "Bearer key-alpha"}
TOTALS = {"cases": 0, "real_video": 0}


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, make_server):
    d = tmp_path_factory.mktemp("fuzz")
    s = make_server(d / "data", d / "server.log", {"VIDEOGEN_MAX_SECONDS": "4", "VIDEOGEN_MAX_PROMPT_CHARS": "200"})
    yield s
    s.stop()
    print(f"\nschemathesis: {TOTALS['cases']} cases ({TOTALS['real_video']} on a real video), "
          f"{MAX_EXAMPLES} max examples per operation")  # fmt: skip


@pytest.fixture(scope="module")
def videos(fuzz_server) -> list[str]:
    """Two completed videos of tenant alpha."""
    ids = []
    with fuzz_server.client() as c:
        for seed in (1, 2):
            r = c.post("/v1/videos", json={"prompt": "a red circle", "model": "tiny", "seconds": "1", "seed": seed})
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])
        for vid in ids:
            assert wait_done(c, vid)["status"] == "completed"
    return ids


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    loaded = schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")
    # Every case carries tenant alpha's key (AUTH), so no generated auth header; and no undeclared
    # query parameters as "invalid" data: like most HTTP APIs the server ignores unknown ones
    # (a browser's cache-busting `?_=...` on the MJPEG URL must not break it).
    loaded.config.generation.update(with_security_parameters=False, allow_extra_parameters=False)
    return loaded


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
def test_every_operation_answers_as_its_openapi_document_says(case, fuzz_server, videos):
    TOTALS["cases"] += 1
    params = case.path_parameters or {}
    if "video_id" in params and case.method != "DELETE" and zlib.crc32(repr(params).encode()) % 2:
        params["video_id"] = videos[zlib.crc32(repr(case.query).encode()) % len(videos)]
        TOTALS["real_video"] += 1
    response = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=30)
    if case.method == "POST" and case.path in ("/v1/videos", "/v1/videos/extensions") and response.status_code == 200:
        httpx.post(f"{fuzz_server.url}/v1/videos/{response.json()['id']}/cancel", headers=AUTH, timeout=30)
