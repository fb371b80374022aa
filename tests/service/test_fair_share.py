"""Fair share between tenants (issue 21): one tenant's burst does not starve another.

Workers take tenants in turn (`JobStore.next_queued`), in embedded mode and in a Celery fleet
alike (a Celery message is only a wake-up; the worker claims the store's fair-share next job),
and a tenant's queued jobs and create rate are capped (429 with Retry-After)."""

from __future__ import annotations

import time
import uuid

import pytest
from service_helpers import wait_done

from videogen.api.store import JobStore
from videogen.api.tables import Job, new_job_id

JOB = {"prompt": "a red circle moving right", "model": "tiny", "seconds": "1", "size": "32x32", "steps": 2}


def _burst_then_one(server, db_url: str) -> None:
    """Tenant alpha queues 20 jobs, then beta 1: beta's job starts before alpha's third."""
    with server.client("key-alpha") as alpha, server.client("key-beta") as beta:
        a_ids = [alpha.post("/v1/videos", json=JOB).json()["id"] for _ in range(20)]
        b_id = beta.post("/v1/videos", json=JOB).json()["id"]
        assert wait_done(beta, b_id, timeout=120)["status"] == "completed"
        for vid in a_ids[:3]:
            assert wait_done(alpha, vid, timeout=120)["status"] == "completed"
        for vid in a_ids[3:]:  # the rest need not run here
            alpha.post(f"/v1/videos/{vid}/cancel")
    store = JobStore(db_url)
    started = sorted((store.get_any(v).started_at or float("inf"), v) for v in [*a_ids, b_id])
    order = [v for _, v in started]
    assert order.index(b_id) < order.index(sorted(a_ids, key=order.index)[2]), "beta waited behind alpha's burst"
    store.engine.dispose()


def test_embedded_worker_alternates_tenants_instead_of_fifo(serve, tmp_path):
    server = serve()
    _burst_then_one(server, f"sqlite:///{server.data_dir / 'jobs.db'}")


def test_a_fleet_worker_claims_the_fair_share_next_job_whatever_the_message_names(serve, fleet_env, celery_worker):
    server = serve(extra_env=fleet_env)
    celery_worker(fleet_env)
    _burst_then_one(server, fleet_env["DATABASE_URL"])


def test_over_the_queued_cap_or_the_create_rate_is_a_429_with_retry_after(serve, redis_url, tmp_path):
    # A fleet with no worker: nothing leaves the queue, so the counts are exact.
    env = {"REDIS_URL": redis_url, "VIDEOGEN_QUEUE": f"videogen-test-{uuid.uuid4().hex[:8]}",
           "VIDEOGEN_TENANT_MAX_QUEUED": "3", "VIDEOGEN_TENANT_RATE": "6", "VIDEOGEN_TENANT_BURST": "4"}  # fmt: skip
    server = serve(extra_env=env)
    with server.client("key-alpha") as alpha, server.client("key-beta") as beta:
        assert [alpha.post("/v1/videos", json=JOB).status_code for _ in range(3)] == [200, 200, 200]
        full = alpha.post("/v1/videos", json=JOB)
        assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
        assert full.json()["error"]["type"] == "rate_limit_error"
        assert full.json()["error"]["code"] == "tenant_max_queued"
        assert "3" in full.json()["error"]["message"]

        limited = alpha.post("/v1/videos", json=JOB)  # the burst of 4 is spent; 6/min refills one per 10 s
        assert limited.status_code == 429 and limited.json()["error"]["code"] == "tenant_rate_limit"
        assert 1 <= int(limited.headers["Retry-After"]) <= 10

        assert beta.post("/v1/videos", json=JOB).status_code == 200  # another tenant is not affected
        assert len(alpha.get("/v1/videos").json()["data"]) == 3  # the refused creates left no job


# -- the store's dispatch order, on SQLite and PostgreSQL -----------------------------------------
def _queue(store: JobStore, tenant: str, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        job = store.create(Job(id=new_job_id(), tenant=tenant, model="m", prompt="p", seconds="1", size="8x8",
                               spec={}))  # fmt: skip
        ids.append(job.id)
        time.sleep(0.002)  # distinct created_at
    return ids


@pytest.fixture
def store(db_url):
    s = JobStore(db_url)
    yield s
    s.engine.dispose()


def test_next_queued_takes_tenants_in_turn_counting_their_running_jobs(store):
    a = _queue(store, "a", 4)
    b = _queue(store, "b", 2)
    c = _queue(store, "c", 1)
    assert store.next_queued() == [a[0], b[0], c[0], a[1], b[1], a[2], a[3]]
    assert store.claim(a[0], "w1", 60) is not None  # a has one running now: b and c go first
    assert store.next_queued()[:3] == [b[0], c[0], a[1]]


def test_between_jobs_the_tenant_served_longest_ago_goes_first(store):
    a = _queue(store, "a", 3)
    b = _queue(store, "b", 1)
    store.claim(a[0], "w1", 60)
    store.mark_started(a[0], "w1", steps_total=1, segments_total=1, resumed_segments=0, steps_per_segment=1)
    store.finish(a[0], "w1", "completed")  # nobody runs now: a and b have equal turns
    assert store.next_queued() == [b[0], a[1], a[2]]


def test_a_store_file_from_before_the_fair_share_index_opens_and_gets_it(tmp_path):
    from sqlalchemy import inspect, text

    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = JobStore(url)
    _queue(old, "a", 1)
    with old.engine.begin() as c:
        c.execute(text("DROP INDEX ix_videogen_jobs_tenant_started"))
    old.engine.dispose()
    store = JobStore(url)
    assert "ix_videogen_jobs_tenant_started" in {i["name"] for i in inspect(store.engine).get_indexes("videogen_jobs")}
    assert len(store.next_queued()) == 1
    store.engine.dispose()


def test_a_weight_2_tenant_gets_two_turns_per_round(store):
    store.tenant_weights = {"a": 2.0}
    a = _queue(store, "a", 4)
    b = _queue(store, "b", 2)
    assert store.next_queued() == [a[0], a[1], b[0], a[2], a[3], b[1]]


def test_a_tenant_at_its_running_cap_waits_while_others_run(store):
    store.tenant_max_running = 1
    a = _queue(store, "a", 3)
    b = _queue(store, "b", 1)
    assert store.claim(a[0], "w1", 60) is not None
    assert store.next_queued() == [b[0]]
    store.finish(a[0], "w1", "completed")
    assert store.next_queued()[0] == a[1]


def test_the_queued_cap_is_checked_in_the_create(store):
    from videogen.api.store import TenantQueueFull

    _queue(store, "a", 2)
    with pytest.raises(TenantQueueFull):
        store.create(Job(id=new_job_id(), tenant="a", model="m", prompt="p", seconds="1", size="8x8", spec={}),
                     max_queued=2)  # fmt: skip
    store.create(Job(id=new_job_id(), tenant="b", model="m", prompt="p", seconds="1", size="8x8", spec={}),
                 max_queued=2)  # fmt: skip
