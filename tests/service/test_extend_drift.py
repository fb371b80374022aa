"""`POST /v1/videos/extensions` accepts `drift_correction` as create does: merged over the source's,
validated the same way (400 naming `drift_correction.<key>`)."""

from __future__ import annotations

import pytest
from service_helpers import wait_done

FAST = {"model": "tiny", "seconds": "2", "size": "32x32"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, make_server):
    d = tmp_path_factory.mktemp("extend_drift")
    s = make_server(d / "data", d / "server.log")
    yield s
    s.stop()


def test_extensions_accept_drift_correction_and_reject_unknown_keys(alpha):
    r = alpha.post("/v1/videos", json={"prompt": "a red circle moving right", **FAST})
    assert r.status_code == 200, r.text
    source = wait_done(alpha, r.json()["id"])
    ext = {"prompt": "a blue square", "seconds": "1", "video": {"id": source["id"]}}
    bad = alpha.post("/v1/videos/extensions", json={**ext, "drift_correction": {"anchr": "source"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "drift_correction.anchr", bad.text
    bad = alpha.post("/v1/videos/extensions", json={**ext, "drift_correction": {"anchor": "previous"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "drift_correction.anchor", bad.text
    r = alpha.post("/v1/videos/extensions", json={**ext, "drift_correction": {"mode": "off"}})
    assert r.status_code == 200, r.text
    assert wait_done(alpha, r.json()["id"])["status"] == "completed"
