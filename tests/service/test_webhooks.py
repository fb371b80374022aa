"""Webhooks (`api.webhooks`) against a real `videogen serve` and a real HTTP receiver on 127.0.0.1
(allowed through VIDEOGEN_WEBHOOK_ALLOW_HOSTS): Standard Webhooks signatures, retries with the
same `webhook-id`, delivery state on the job, resume after a restart, SSRF refusals, and a
receiver that never answers holding up nothing else."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import REPO, _env
from service_helpers import wait_done, wait_for

SECRET = "whsec_" + base64.b64encode(b"alpha-and-everyone-else-32bytes!").decode()
BETA_SECRET = "whsec_" + base64.b64encode(b"beta-has-its-very-own-key-0123").decode()
FAST = {"prompt": "a red circle", "model": "tiny", "seconds": "1", "size": "32x32"}


class Receiver:
    """A threading HTTP server: `/ok` answers 204, `/flaky` 500 to the first `fail_first` attempts
    of each webhook-id, `/down` 500 while `down` is set, `/hang` only once `release` is set."""

    def __init__(self, fail_first: int = 2) -> None:
        self.requests: list[dict] = []
        self.fail_first = fail_first
        self.down = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                entry = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                         "body": body, "at": time.time()}  # fmt: skip
                with receiver.lock:
                    receiver.requests.append(entry)
                    seen = sum(1 for r in receiver.requests if r["headers"].get("webhook-id") == entry["headers"].get(
                        "webhook-id") and r["path"] == self.path)  # fmt: skip
                flaky = self.path == "/flaky" and seen <= receiver.fail_first
                status = 500 if flaky or (self.path == "/down" and receiver.down.is_set()) else 204
                if self.path == "/hang":
                    receiver.release.wait(30)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:  # the sender gave up (timeout)
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def to(self, path: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def wait(self, path: str, n: int, timeout: float = 60.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.to(path)) < n:
            assert time.monotonic() < deadline, f"{path}: {len(self.to(path))} of {n} requests"
            time.sleep(0.05)
        return self.to(path)


def verify(request: dict, secret: str) -> dict:
    """A receiver's Standard Webhooks check; returns the event."""
    h = request["headers"]
    key = base64.b64decode(secret[len("whsec_") :])
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + request["body"]
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    versions = dict(part.split(",", 1) for part in h["webhook-signature"].split(" "))
    assert hmac.compare_digest(versions["v1"], expected), "bad signature"
    assert abs(int(h["webhook-timestamp"]) - time.time()) < 300
    event = json.loads(request["body"])
    assert event["id"] == h["webhook-id"] and event["object"] == "event"
    return event


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


def hook_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    return {"VIDEOGEN_WEBHOOK_SECRET": SECRET, "VIDEOGEN_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
            "VIDEOGEN_WEBHOOK_RETRY_SECONDS": "0.3,0.3,0.3,0.3", "VIDEOGEN_WEBHOOK_POLL_SECONDS": "0.1",
            "VIDEOGEN_WEBHOOK_TIMEOUT_SECONDS": "3", **extra}  # fmt: skip


def test_completed_event_is_signed_and_retried_with_the_same_webhook_id(serve, receiver):
    server = serve(extra_env=hook_env(receiver))
    with server.client() as c:
        r = c.post("/v1/videos", json={**FAST, "webhook_url": receiver.url + "/flaky"})
        assert r.status_code == 200, r.text
        video = r.json()
        assert video["webhook"] == {"url": receiver.url + "/flaky", "status": "waiting", "event_id": None,
                                    "attempts": 0, "last_error": None}  # fmt: skip
        assert wait_done(c, video["id"])["status"] == "completed"
        done = wait_for(c, video["id"], lambda v: v["webhook"]["status"] != "pending" and v["webhook"]["attempts"])
    hook = done["webhook"]
    assert hook["status"] == "delivered" and hook["attempts"] == 3 and hook["last_error"] is None, hook
    requests = receiver.to("/flaky")
    assert len(requests) == 3  # 500, 500, 204
    events = [verify(r, SECRET) for r in requests]
    assert {r["headers"]["webhook-id"] for r in requests} == {hook["event_id"]}
    assert hook["event_id"].startswith("evt_")
    assert events[0] == {"id": hook["event_id"], "object": "event", "type": "video.completed",
                         "created_at": done["completed_at"], "data": {"id": video["id"]}}  # fmt: skip
    gaps = [b["at"] - a["at"] for a, b in zip(requests, requests[1:], strict=False)]
    assert all(g >= 0.25 for g in gaps), gaps  # the retry schedule's waits (0.3 s)


def test_a_tenant_default_url_and_secret_and_a_cancelled_event(serve, receiver):
    server = serve(extra_env=hook_env(receiver, VIDEOGEN_WEBHOOKS=f"beta={receiver.url}/ok",
                                      VIDEOGEN_WEBHOOK_SECRETS=f"beta={BETA_SECRET}"))  # fmt: skip
    with server.client("key-beta") as beta, server.client() as alpha:
        slow = beta.post("/v1/videos", json={**FAST, "seconds": "6", "size": "96x96", "steps": 4}).json()
        queued = beta.post("/v1/videos", json=FAST).json()  # waits behind the slow one
        assert queued["webhook"]["url"] == f"{receiver.url}/ok"
        assert beta.post(f"/v1/videos/{queued['id']}/cancel").json()["status"] == "cancelled"
        none = alpha.post("/v1/videos", json={**FAST, "webhook_url": ""}).json()  # alpha has no default
        assert none["webhook"] is None
        opted_out = beta.post("/v1/videos", json={**FAST, "webhook_url": ""}).json()
        assert opted_out["webhook"] is None
        beta.post(f"/v1/videos/{slow['id']}/cancel")
        requests = receiver.wait("/ok", 2)
        events = {verify(r, BETA_SECRET)["data"]["id"]: verify(r, BETA_SECRET)["type"] for r in requests}
        assert events == {queued["id"]: "video.cancelled", slow["id"]: "video.cancelled"}
        with pytest.raises(AssertionError):
            verify(requests[0], SECRET)  # signed with beta's own secret, not the server's
        assert wait_for(beta, queued["id"], lambda v: v["webhook"]["status"] == "delivered")["webhook"]["attempts"] == 1


def test_a_pending_delivery_survives_a_restart(serve, receiver, tmp_path):
    receiver.down.set()
    env = hook_env(receiver, VIDEOGEN_WEBHOOK_RETRY_SECONDS="0.5," * 40 + "0.5")
    server = serve(extra_env=env, data_dir=tmp_path / "data")
    with server.client() as c:
        video = c.post("/v1/videos", json={**FAST, "webhook_url": receiver.url + "/down"}).json()
        wait_done(c, video["id"])
        failing = wait_for(c, video["id"], lambda v: v["webhook"]["attempts"] >= 2)["webhook"]
        assert failing["status"] == "pending" and failing["last_error"] == "HTTP 500", failing
    server.stop()
    receiver.down.clear()
    server = serve(extra_env=env, data_dir=tmp_path / "data")
    with server.client() as c:
        hook = wait_for(c, video["id"], lambda v: v["webhook"]["status"] == "delivered")["webhook"]
    ids = {r["headers"]["webhook-id"] for r in receiver.to("/down")}
    assert ids == {hook["event_id"]} and hook["attempts"] == len(receiver.to("/down"))


def test_a_receiver_that_never_answers_delays_nothing_else(serve, receiver):
    server = serve(extra_env=hook_env(receiver, VIDEOGEN_WEBHOOK_TIMEOUT_SECONDS="20"))
    with server.client() as c:
        stuck = c.post("/v1/videos", json={**FAST, "webhook_url": receiver.url + "/hang"}).json()
        assert wait_done(c, stuck["id"])["status"] == "completed"
        receiver.wait("/hang", 1)  # its attempt is now waiting for an answer that does not come
        t0 = time.monotonic()
        other = c.post("/v1/videos", json={**FAST, "seed": 2, "webhook_url": receiver.url + "/ok"}).json()
        assert time.monotonic() - t0 < 5  # the API answers
        done = wait_done(c, other["id"])
        assert done["status"] == "completed"
        receiver.wait("/ok", 1, timeout=15)
        assert time.time() - receiver.to("/ok")[0]["at"] >= 0  # delivered ...
        assert receiver.to("/ok")[0]["at"] - done["completed_at"] < 5  # ... promptly
        assert c.get(f"/v1/videos/{stuck['id']}").json()["webhook"]["status"] == "pending"  # still hanging
        assert len(receiver.to("/hang")) == 1


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory, make_server):
    """A server with a signing secret and no allow-list: only public https URLs."""
    d = tmp_path_factory.mktemp("strict")
    s = make_server(d / "data", d / "server.log", {"VIDEOGEN_WEBHOOK_SECRET": SECRET})
    yield s
    s.stop()


@pytest.mark.parametrize("url", ["http://10.0.0.1/", "https://10.0.0.1/hook", "http://example.com/hook",
                                 "https://169.254.169.254/latest/meta-data", "https://localhost/x", "ftp://x.org/",
                                 "https://[::1]/", "https://192.168.1.1:8443/", "https://user:pw@example.com/",
                                 "not a url"])  # fmt: skip
def test_a_webhook_url_that_is_not_public_https_is_a_400_naming_it(strict_server, url):
    with strict_server.client() as c:
        r = c.post("/v1/videos", json={**FAST, "webhook_url": url})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "webhook_url" and "webhook_url" in err["message"], err
        r = c.post("/v1/videos/extensions", json={"prompt": "more", "seconds": 1, "video": {"id": "video_" + "0" * 32},
                                                  "webhook_url": url})  # fmt: skip
        assert r.status_code == 400 and r.json()["error"]["param"] == "webhook_url", r.text
        assert c.get("/v1/videos").json()["data"] == []  # nothing was created


def test_a_url_without_a_signing_secret_is_refused(serve):
    server = serve()
    with server.client() as c:
        r = c.post("/v1/videos", json={**FAST, "webhook_url": "https://8.8.8.8/hook"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "webhook_url"
    assert "secret" in r.json()["error"]["message"]


@pytest.mark.parametrize("env, words", [
    ({"VIDEOGEN_WEBHOOK_SECRET": "hunter2"}, "VIDEOGEN_WEBHOOK_SECRET"),
    ({"VIDEOGEN_WEBHOOK_SECRET": SECRET, "VIDEOGEN_WEBHOOKS": "alpha=http://10.0.0.1/"}, "VIDEOGEN_WEBHOOKS (alpha)"),
    ({"VIDEOGEN_WEBHOOKS": "alpha=https://8.8.8.8/"}, "no signing secret"),
    ({"VIDEOGEN_WEBHOOK_SECRETS": "beta"}, "VIDEOGEN_WEBHOOK_SECRETS"),
    ({"VIDEOGEN_WEBHOOK_RETRY_SECONDS": "5,soon"}, "VIDEOGEN_WEBHOOK_RETRY_SECONDS"),
])  # fmt: skip
def test_bad_webhook_settings_are_a_one_line_start_up_error(service_env, tmp_path, env, words):
    p = subprocess.run([sys.executable, "-m", "videogen.cli", "serve", "--port", "1", "--data-dir", str(tmp_path)],
                       env=_env({**service_env, **env}), cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("videogen: error:"), p.stderr
    assert "hunter2" not in p.stderr


def test_an_older_store_file_gets_the_webhook_columns(tmp_path):
    from videogen.api.store import JobStore
    from videogen.api.tables import Job

    path = tmp_path / "jobs.db"
    JobStore(f"sqlite:///{path}").engine.dispose()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX ix_videogen_jobs_webhook_due")
    for col in ("webhook_url", "webhook_event", "webhook_status", "webhook_attempts", "webhook_next_at",
                "webhook_last_error"):  # fmt: skip
        db.execute(f"ALTER TABLE videogen_jobs DROP COLUMN {col}")
    db.execute("INSERT INTO videogen_jobs (id, tenant, model, prompt, seconds, size, spec, status, steps_done, "
               "steps_total, segments_done, segments_total, attempts, has_video, has_thumbnail, cancel_requested, "
               "deleted, created_at) VALUES ('video_" + "1" * 32 + "', 't', 'tiny', 'p', '1', '32x32', '{}', "
               "'queued', 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0)")  # fmt: skip
    db.commit()
    db.close()
    store = JobStore(f"sqlite:///{path}")
    JobStore(f"sqlite:///{path}")  # twice: idempotent
    old = store.get_any("video_" + "1" * 32)
    assert old.webhook_url is None and old.webhook_attempts == 0
    store.create(Job(id="video_" + "2" * 32, tenant="t", model="tiny", prompt="p", seconds="1", size="32x32",
                     spec={}, webhook_url="https://8.8.8.8/"))  # fmt: skip
    ended = store.finish("video_" + "2" * 32, None, "cancelled")
    assert ended.webhook_status == "pending" and ended.webhook_event.startswith("evt_")
    assert [j.id for j in store.due_webhooks()] == ["video_" + "2" * 32]
    names = {r[1] for r in sqlite3.connect(path).execute("PRAGMA index_list(videogen_jobs)")}
    assert "ix_videogen_jobs_webhook_due" in names
