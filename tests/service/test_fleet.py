"""A fleet over a real Redis: `videogen serve` with REDIS_URL (API only) and real Celery worker
processes (`celery -A workers.celery_app worker --pool=solo`) rendering with the tiny model."""

from __future__ import annotations

import time

import pytest
from service_helpers import decode, sse_events, wait_done, wait_for

SLOW = {"prompt": "a red circle moving right", "model": "tiny", "seconds": "6", "size": "96x96", "steps": 3, "seed": 3}


@pytest.fixture
def fleet(serve, fleet_env):
    server = serve(extra_env=fleet_env)
    assert server.client().get("/readyz").json()["mode"] == "fleet"
    return server


def test_a_celery_worker_renders_a_job_sent_through_redis(fleet, fleet_env, celery_worker, tmp_path):
    celery_worker(fleet_env)
    with fleet.client() as c:
        video = c.post("/v1/videos", json={"prompt": "a cat", "model": "tiny", "seconds": "2", "size": "32x32"}).json()
        done = wait_done(c, video["id"], timeout=90)
        assert done["status"] == "completed" and done["progress"] == 100, done
        (tmp_path / "v.mp4").write_bytes(c.get(f"/v1/videos/{video['id']}/content").content)
    assert decode(tmp_path / "v.mp4").shape == (16, 32, 32, 3)


def test_kill_9_mid_job_resumes_from_the_last_segment_and_the_video_is_identical(
    fleet, fleet_env, celery_worker, tmp_path
):
    first = celery_worker(fleet_env)
    with fleet.client() as c:
        job = c.post("/v1/videos", json=SLOW).json()
        at_kill = wait_for(c, job["id"], lambda v: v["segments_done"] >= 2, timeout=90, interval=0.02)
        first.kill9()
        assert at_kill["segments_done"] < at_kill["segments_total"], "the job finished before the kill"

        celery_worker(fleet_env)  # the dead worker's lease runs out; the job is requeued and resumed here
        done = wait_done(c, job["id"], timeout=90)
        assert done["status"] == "completed", done
        events = sse_events(c, job["id"])
        starts = [d for k, d in events if k == "status" and d["status"] == "in_progress"]
        assert len(starts) == 2 and starts[1]["resumed_segments"] >= at_kill["segments_done"]
        resumed = starts[1]["resumed_segments"]
        after_restart = [d for k, d in events[events.index(("status", starts[1])) :] if k == "segment"]
        assert [d["resumed"] for d in after_restart[:resumed]] == [True] * resumed  # not generated again
        assert not any(d["resumed"] for d in after_restart[resumed:])

        # The same request, uninterrupted, on the same kind of worker process.
        reference = c.post("/v1/videos", json=SLOW).json()
        assert wait_done(c, reference["id"], timeout=90)["status"] == "completed"
        for vid, name in ((job["id"], "resumed.mp4"), (reference["id"], "reference.mp4")):
            (tmp_path / name).write_bytes(c.get(f"/v1/videos/{vid}/content").content)
    resumed_frames, reference_frames = decode(tmp_path / "resumed.mp4"), decode(tmp_path / "reference.mp4")
    assert resumed_frames.shape == reference_frames.shape == (48, 96, 96, 3)
    assert (resumed_frames == reference_frames).all()
    assert (tmp_path / "resumed.mp4").read_bytes() == (tmp_path / "reference.mp4").read_bytes()


def test_a_redelivered_message_never_runs_a_job_twice(fleet, fleet_env, celery_worker):
    from videogen.api.dispatch import CeleryQueue

    celery_worker(fleet_env)
    celery_worker(fleet_env)  # two workers, so a duplicate message would be picked up at once
    queue = CeleryQueue(fleet_env["REDIS_URL"], fleet_env["VIDEOGEN_QUEUE"], 3600)
    with fleet.client() as c:
        job = c.post("/v1/videos", json={**SLOW, "seconds": "3"}).json()
        wait_for(c, job["id"], lambda v: v["status"] == "in_progress", timeout=60, interval=0.02)
        queue.submit(job["id"])  # what Redis does when a visibility timeout is too short
        queue.submit(job["id"])
        assert wait_done(c, job["id"], timeout=90)["status"] == "completed"
        time.sleep(1.0)  # let the duplicates be consumed
        starts = [d for k, d in sse_events(c, job["id"]) if k == "status" and d["status"] == "in_progress"]
        assert len(starts) == 1
