"""The job store on SQLite and PostgreSQL: tenancy, pagination, leases, cancel and expiry."""

from __future__ import annotations

import time

import pytest

from videogen.api.store import JobStore
from videogen.api.tables import CANCELLED, COMPLETED, IN_PROGRESS, QUEUED, Job, is_job_id, new_job_id


@pytest.fixture
def store(db_url):
    s = JobStore(db_url, output_ttl_seconds=60)
    yield s
    s.engine.dispose()


def add(store: JobStore, tenant: str = "alpha", created_at: float | None = None) -> Job:
    return store.create(Job(id=new_job_id(), tenant=tenant, model="tiny", prompt="a red circle", seconds="1",
                            size="32x32", spec={"shots": []}, created_at=created_at or time.time()))  # fmt: skip


def start(store: JobStore, job: Job, worker: str = "w1", lease: float = 30.0) -> None:
    assert store.claim(job.id, worker, lease) is not None
    assert store.mark_started(job.id, worker, steps_total=4, segments_total=2, resumed_segments=0, steps_per_segment=2)


def test_job_ids_are_ours_and_nothing_else_passes_as_one():
    assert is_job_id(new_job_id())
    for bad in ("video_../../etc", "video_" + "g" * 32, "../video_" + "0" * 32, "", "video_" + "0" * 31):
        assert not is_job_id(bad)


def test_another_tenants_job_is_invisible(store):
    job = add(store, "alpha")
    assert store.get("alpha", job.id).id == job.id
    assert store.get("beta", job.id) is None
    assert store.request_cancel("beta", job.id) is None
    assert store.delete("beta", job.id) is None
    assert store.list("beta", after=None, limit=10, order="desc").jobs == []


def test_list_pages_by_cursor_in_both_orders(store):
    jobs = [add(store, created_at=1000.0 + i) for i in range(5)]
    add(store, "beta")
    page = store.list("alpha", after=None, limit=2, order="asc")
    assert [j.id for j in page.jobs] == [jobs[0].id, jobs[1].id] and page.has_more
    page = store.list("alpha", after=jobs[1].id, limit=10, order="asc")
    assert [j.id for j in page.jobs] == [j.id for j in jobs[2:]] and not page.has_more
    page = store.list("alpha", after=jobs[3].id, limit=10, order="desc")
    assert [j.id for j in page.jobs] == [jobs[2].id, jobs[1].id, jobs[0].id]
    assert store.list("beta", after=jobs[0].id, limit=10, order="asc") is None  # a cursor from another tenant


def test_only_one_worker_holds_a_job_at_a_time(store):
    job = add(store)
    assert store.claim(job.id, "w1", 30) is not None
    assert store.claim(job.id, "w2", 30) is None  # e.g. Celery delivered the message twice
    assert store.claim(job.id, "w1", 30) is not None  # the holder may claim again
    assert store.renew(job.id, "w1", 30) and not store.renew(job.id, "w2", 30)


def test_progress_is_steps_done_over_all_steps(store):
    job = add(store)
    start(store, job)
    assert store.get("alpha", job.id).status == IN_PROGRESS
    store.record_step(job.id, "w1", 0, 1, 2)
    store.record_step(job.id, "w2", 0, 2, 2)  # not the lease holder: ignored
    assert store.get("alpha", job.id).progress == 25
    store.finish(job.id, "w1", COMPLETED, has_video=True)
    done = store.get("alpha", job.id)
    assert (done.status, done.progress, done.expires_at - done.completed_at) == (COMPLETED, 100, 60)


def test_an_expired_lease_puts_the_job_back_in_the_queue(store):
    job = add(store)
    start(store, job, "dead-worker", lease=0.05)
    time.sleep(0.1)
    assert [j.id for j in store.requeue_expired()] == [job.id]
    assert store.get("alpha", job.id).status == QUEUED
    assert store.claim(job.id, "w2", 30) is not None  # another worker takes it over
    assert not store.renew(job.id, "dead-worker", 30)


def test_cancelling_a_queued_job_is_immediate_and_a_running_one_sets_the_flag(store):
    queued, running = add(store), add(store)
    start(store, running)
    assert store.request_cancel("alpha", queued.id).status == CANCELLED
    assert store.claim(queued.id, "w1", 30) is None
    assert store.request_cancel("alpha", running.id).status == IN_PROGRESS
    assert store.cancel_requested(running.id)


def test_events_record_every_state_change_in_order(store):
    job = add(store)
    start(store, job)
    store.record_step(job.id, "w1", 0, 1, 2)
    store.record_segment(job.id, "w1", 0, 13, False)
    store.finish(job.id, "w1", COMPLETED)
    kinds = [(e.type, e.data.get("status")) for e in store.events_after(job.id, 0)]
    assert kinds == [("status", QUEUED), ("status", IN_PROGRESS), ("progress", None), ("segment", None),
                     ("status", COMPLETED)]  # fmt: skip


def test_expired_and_deleted_jobs_are_due_for_cleanup(store):
    old, deleted, fresh = add(store), add(store), add(store)
    for j in (old, deleted, fresh):
        start(store, j)
        store.finish(j.id, "w1", COMPLETED)
    store.delete("alpha", deleted.id)
    due = {j.id for j in store.expired(now=time.time() + 30)}
    assert due == {deleted.id}
    assert {j.id for j in store.expired(now=time.time() + 120)} == {old.id, deleted.id, fresh.id}
    store.purge(old.id)
    assert store.get_any(old.id) is None and store.events_after(old.id, 0) == []


def add_stream(store: JobStore) -> Job:
    return store.create(Job(id=new_job_id(), tenant="alpha", model="builtin-causal", prompt="red", seconds="3",
                            size="64x64", spec={"kind": "stream", "prompt": "red", "fps": 16.0}, steps_total=48,
                            segments_total=5, created_at=time.time()))  # fmt: skip


def chunk(store: JobStore, job: Job, index: int, prompt: str, worker: str = "w1"):
    first = 0 if index == 0 else 1 + 12 * (index - 1)  # the first frame alone, then 12 frames a chunk
    return store.record_chunk(job.id, worker, index=index, first_frame=first, frames=1 if index == 0 else 12,
                              prompt=prompt, fps=16.0)  # fmt: skip


def test_a_stream_takes_the_latest_prompt_switch_and_records_the_switches_it_shows(store):
    job = add_stream(store)
    assert store.request_prompt("beta", job.id, "blue") is None  # another tenant's
    assert store.claim(job.id, "w1", 30) is not None
    controls = store.take_controls(job.id, "w1")
    assert (controls.cancel, controls.prompt) == (False, None)
    store.request_prompt("alpha", job.id, "green")
    store.request_prompt("alpha", job.id, "blue")
    c = chunk(store, job, 0, "red")
    assert (c.cancel, c.prompt) == (False, "blue")  # green was superseded before any chunk showed it
    assert chunk(store, job, 1, "blue").prompt is None  # taken once
    got = store.get("alpha", job.id)
    assert got.spec["prompt_switches"] == [{"at_seconds": 1 / 16, "frame": 1, "chunk": 1, "prompt": "blue"}]
    assert (got.steps_done, got.segments_done, got.progress) == (13, 2, 27)  # frames, chunks, frames / 48
    assert [e.data["prompt"] for e in store.events_after(job.id, 0) if e.type == "prompt"] == ["blue"]

    # A worker that takes the job over streams again from frame 0 and replays the recorded switch.
    assert store.claim(job.id, "w2", 30) is None  # w1's lease is live
    with store.write() as s:  # w1's lease runs out
        s.get(Job, job.id).lease_expires = 0.0
    assert store.claim(job.id, "w2", 30) is not None
    assert chunk(store, job, 0, "red", "w2").cancel is False
    assert chunk(store, job, 1, "blue", "w2").cancel is False
    assert chunk(store, job, 2, "blue", "w1").cancel is True  # w1 lost the job: it must stop
    assert len(store.get("alpha", job.id).spec["prompt_switches"]) == 1  # not recorded twice

    store.request_cancel("alpha", job.id)
    assert chunk(store, job, 2, "blue", "w2").cancel is True
    store.finish(job.id, "w2", CANCELLED)
    assert store.request_prompt("alpha", job.id, "red").status == CANCELLED  # nothing queued any more
    assert store.take_controls(job.id, "w2").cancel is True
