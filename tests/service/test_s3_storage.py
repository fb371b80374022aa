"""Outputs in an S3-compatible bucket (`VIDEOGEN_STORAGE_URL=s3://bucket/prefix`), against a real
S3 endpoint over HTTP: `moto_server` in a subprocess on 127.0.0.1 (not an in-process mock).

* embedded `videogen serve`: the video, thumbnail, drift report and plot land in the bucket, the
  data dir keeps none of them, `/content` serves the bucket's bytes (and one `Range`), an extension
  continues a source that lives only in the bucket, delete removes the objects, `/readyz` checks it;
* a fleet: API and Celery worker with different data dirs (no shared filesystem for outputs), an
  `input_reference` upload travelling through the bucket, `/content` as a 307 to a presigned URL;
* start-up: unknown scheme, missing bucket, unreachable endpoint, missing credentials -> one line,
  exit 2 (serve and worker).
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from conftest import REPO, _env, free_port
from service_helpers import decode, stream_presets, wait_done

boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (pip install 'videogen[s3]')")
if shutil.which("moto_server") is None:
    pytest.skip("moto_server is not installed (pip install 'moto[server]')", allow_module_level=True)

FAST = {"model": "tiny", "seconds": "2", "size": "32x32", "seed": 5}  # 16 frames: 2 segments x 2 steps
OUTPUTS = {"video.mp4", "thumbnail.png", "video.mp4.drift.json", "video.mp4.drift.png", "tail.pt"}
ISOLATED = {  # no credentials or config of the machine the tests run on
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free port: (env for videogen, boto3 client of it)."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as fh:
        p = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=subprocess.STDOUT,
                             start_new_session=True)  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.HTTPError:
                if p.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start:\n{log.read_text()}")
                time.sleep(0.1)
        env = {**ISOLATED, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")  # fmt: skip
        yield env, client
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)


def new_bucket(s3) -> tuple[dict[str, str], str]:
    env, client = s3
    bucket = f"vg-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    return {**env, "VIDEOGEN_STORAGE_URL": f"s3://{bucket}/out/put"}, bucket


def objects(client, bucket: str, job_id: str) -> dict[str, bytes]:
    prefix = f"out/put/outputs/{job_id}/"
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix) :]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def create(client: httpx.Client, **fields) -> dict:
    r = client.post("/v1/videos", json={"prompt": "a red circle moving right", **FAST, **fields})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def embedded(s3, tmp_path_factory, make_server, tiny_model):
    env, bucket = new_bucket(s3)
    d = tmp_path_factory.mktemp("s3-embedded")
    (d / "config").mkdir()
    (d / "config" / "models.yaml").write_text(stream_presets(tiny_model))  # tiny + a stream model
    server = make_server(d / "data", d / "server.log", {**env, "VIDEOGEN_CONFIG_DIR": str(d / "config")})
    yield server, bucket
    server.stop()


def test_outputs_go_to_the_bucket_and_content_serves_them_byte_for_byte(embedded, s3, tmp_path):
    server, bucket = embedded
    client = s3[1]
    with server.client() as alpha:
        job = wait_done(alpha, create(alpha)["id"])
        assert job["status"] == "completed", job
        ready = alpha.get("/readyz")  # the worker is up now: it rendered
        assert ready.status_code == 200 and ready.json()["checks"]["object_storage"] == "ok", ready.text
        stored = objects(client, bucket, job["id"])
        assert set(stored) == OUTPUTS
        assert not (server.data_dir / "outputs" / job["id"]).exists()  # the data dir keeps no output
        assert not (server.data_dir / "work" / job["id"]).exists()
        for variant, name in (("video", "video.mp4"), ("thumbnail", "thumbnail.png"),
                              ("drift_report", "video.mp4.drift.json"), ("drift_plot", "video.mp4.drift.png")):  # fmt: skip
            r = alpha.get(f"/v1/videos/{job['id']}/content", params={"variant": variant})
            assert r.status_code == 200 and r.content == stored[name], variant
            assert f'filename="{job["id"]}.' in r.headers["content-disposition"]
        assert r.headers["content-type"] == "image/png"
        (tmp_path / "v.mp4").write_bytes(stored["video.mp4"])
        assert decode(tmp_path / "v.mp4").shape == (16, 32, 32, 3)  # the MP4 plays: 16 frames of 32x32
        assert (
            alpha.get(f"/v1/videos/{job['id']}/content", params={"variant": "drift_report"}).json()["num_frames"] == 16
        )

        # One byte range, as the local file answers it (206, Content-Range); past the end: 416.
        video = stored["video.mp4"]
        r = alpha.get(f"/v1/videos/{job['id']}/content", headers={"Range": "bytes=100-1099"})
        assert (r.status_code, r.content, r.headers["content-range"]) == (206, video[100:1100],
                                                                         f"bytes 100-1099/{len(video)}")  # fmt: skip
        r = alpha.get(f"/v1/videos/{job['id']}/content", headers={"Range": "bytes=-50"})
        assert (r.status_code, r.content) == (206, video[-50:])
        r = alpha.get(f"/v1/videos/{job['id']}/content", headers={"Range": f"bytes={len(video) + 10}-"})
        assert r.status_code == 416

        # An extension: its worker takes the source's video and tail from the bucket.
        r = alpha.post("/v1/videos/extensions", json={"prompt": "a green circle", "seconds": "1",
                                                      "video": {"id": job["id"]}})  # fmt: skip
        assert r.status_code == 200, r.text
        ext = wait_done(alpha, r.json()["id"])
        assert ext["status"] == "completed", ext
        assert set(objects(client, bucket, ext["id"])) == OUTPUTS
        (tmp_path / "e.mp4").write_bytes(alpha.get(f"/v1/videos/{ext['id']}/content").content)
        out = decode(tmp_path / "e.mp4")
        assert out.shape[0] == 24 and (out[:16] == decode(tmp_path / "v.mp4")).all()
        assert not (server.data_dir / "work" / ext["id"]).exists()


def test_a_finished_stream_goes_to_the_bucket_and_delete_removes_the_objects(embedded, s3, tmp_path):
    server, bucket = embedded
    with server.client() as alpha:
        r = alpha.post("/v1/videos", json={"prompt": "a red circle", "model": "builtin-causal", "stream": True,
                                           "size": "32x32", "seconds": 1, "steps": 2})  # fmt: skip
        assert r.status_code == 200, r.text
        stream = wait_done(alpha, r.json()["id"], timeout=120)
        assert stream["status"] == "completed", stream
        stored = objects(s3[1], bucket, stream["id"])
        assert set(stored) == {"video.mp4", "thumbnail.png"}
        assert alpha.get(f"/v1/videos/{stream['id']}/content").content == stored["video.mp4"]
        (tmp_path / "s.mp4").write_bytes(stored["video.mp4"])
        assert decode(tmp_path / "s.mp4").shape[0] == stream["stream"]["frames_total"]
        assert not (server.data_dir / "outputs" / stream["id"]).exists()
        job = wait_done(alpha, create(alpha, seed=9)["id"])
        assert set(objects(s3[1], bucket, job["id"])) == OUTPUTS
        assert alpha.delete(f"/v1/videos/{job['id']}").json()["deleted"] is True
        assert objects(s3[1], bucket, job["id"]) == {}
        assert alpha.get(f"/v1/videos/{job['id']}/content").status_code == 404


def test_a_fleet_shares_outputs_through_the_bucket_and_redirects_to_presigned_urls(
    s3, serve, celery_worker, fleet_env, tmp_path
):
    from PIL import Image

    env, bucket = new_bucket(s3)
    env = {**fleet_env, **env, "VIDEOGEN_STORAGE_REDIRECT": "1", "VIDEOGEN_STORAGE_REDIRECT_SECONDS": "120"}
    server = serve(env)
    celery_worker({**env, "VIDEOGEN_DATA_DIR": str(tmp_path / "worker-data")})  # not the API's data dir
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buf, format="PNG")
    with server.client() as alpha:
        r = alpha.post("/v1/videos", data={"prompt": "a red cat", **{k: str(v) for k, v in FAST.items()}},
                       files={"input_reference": ("ref.png", buf.getvalue(), "image/png")})  # fmt: skip
        assert r.status_code == 200, r.text
        job = wait_done(alpha, r.json()["id"], timeout=120)
        assert job["status"] == "completed", job
        stored = objects(s3[1], bucket, job["id"])
        assert set(stored) == OUTPUTS | {"input_reference"} and stored["input_reference"] == buf.getvalue()
        assert not (tmp_path / "worker-data" / "outputs" / job["id"]).exists()
        assert not (tmp_path / "data" / "outputs" / job["id"]).exists()
        for variant, name in (("video", "video.mp4"), ("thumbnail", "thumbnail.png")):
            r = alpha.get(f"/v1/videos/{job['id']}/content", params={"variant": variant})
            assert r.status_code == 307 and r.headers["location"].startswith(env["AWS_ENDPOINT_URL"]), r.text
            assert "Expires=" in r.headers["location"] or "X-Amz-Expires=120" in r.headers["location"]
            signed = httpx.get(r.headers["location"], timeout=30)  # no API key: the URL is the credential
            assert signed.status_code == 200 and signed.content == stored[name]
        assert alpha.get(f"/v1/videos/{'video_' + '0' * 32}/content").status_code == 404
        (tmp_path / "v.mp4").write_bytes(stored["video.mp4"])
        assert decode(tmp_path / "v.mp4").shape == (16, 32, 32, 3)


def _run_all(commands: list[tuple[list[str], dict[str, str]]], timeout: float = 120) -> list[tuple[int, str, str]]:
    """Run start-ups side by side (each fails fast; their imports are most of the time)."""
    procs = [subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for args, env in commands]  # fmt: skip
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    return results


def test_unusable_storage_is_one_line_and_exit_2_at_start_up(s3, service_env, tmp_path):
    env, _ = new_bucket(s3)
    cases = {
        "unknown storage scheme 'gs'": {"VIDEOGEN_STORAGE_URL": "gs://bucket/x"},
        "no bucket": {"VIDEOGEN_STORAGE_URL": "s3:///x"},
        "no such bucket 'vg-missing'": {"VIDEOGEN_STORAGE_URL": "s3://vg-missing/x"},
        "does not answer": {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"},
        "no credentials": {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None},
    }
    commands = []
    for i, bad in enumerate(cases.values()):
        run_env = _env({**service_env, **env, **{k: v for k, v in bad.items() if v is not None}})
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            if k in bad or k not in env:
                run_env.pop(k, None)
        commands.append(([sys.executable, "-m", "videogen.cli", "serve", "--port", str(free_port()), "--data-dir",
                          str(tmp_path / f"data{i}")], run_env))  # fmt: skip
    # The worker checks the same before it takes any job (its broker is never reached).
    worker_env = _env({**service_env, **env, "VIDEOGEN_STORAGE_URL": "s3://vg-missing/x",
                       "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
                       "VIDEOGEN_DATA_DIR": str(tmp_path / "worker")})  # fmt: skip
    commands.append(([sys.executable, "-m", "celery", "-A", "videogen.workers.celery_app", "worker", "--pool=solo",
                      "--without-gossip", "--without-mingle", "--without-heartbeat"], worker_env))  # fmt: skip
    *serves, (rc, out, err) = _run_all(commands)
    for expected, (code, _, stderr) in zip(cases, serves, strict=True):
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and expected in lines[0], (expected, code, stderr)
        assert lines[0].startswith("videogen: error: ")
        assert "testing" not in stderr  # no secret
    errors = [line for line in (out + err).splitlines() if line.startswith("videogen worker: error: ")]
    assert rc == 2 and len(errors) == 1 and "no such bucket 'vg-missing'" in errors[0], (out, err)
    assert "Traceback" not in err  # (celery's own warning about running as root may precede it)


def test_a_bucket_that_goes_away_fails_the_job_with_storage_error_and_readyz_says_why(embedded, s3):
    """Last in this module: it removes the module server's bucket."""
    server, bucket = embedded
    client = s3[1]
    with server.client() as alpha:
        kept = wait_done(alpha, create(alpha, seed=11)["id"])
        for key in [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]:
            client.delete_object(Bucket=bucket, Key=key)
        client.delete_bucket(Bucket=bucket)
        job = wait_done(alpha, create(alpha, seed=12)["id"])
        assert (job["status"], job["error"]["code"]) == ("failed", "storage_error"), job
        assert str(server.data_dir) not in job["error"]["message"]
        ready = alpha.get("/readyz")
        assert ready.status_code == 503 and f"no such bucket {bucket!r}" in ready.json()["checks"]["object_storage"]
        r = alpha.get(f"/v1/videos/{kept['id']}/content")  # the server's fault, not a file the user lost
        assert r.status_code == 503 and r.json()["error"]["code"] == "storage_error", r.text
        assert alpha.delete(f"/v1/videos/{job['id']}").json()["deleted"] is True  # the reaper retries the objects
