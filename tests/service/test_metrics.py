"""Prometheus metrics (`api.metrics`, `workers.metrics`) scraped over HTTP from a real `videogen serve`
(its embedded worker in a child process, and in a thread) and from a real Celery worker started
with `videogen worker --metrics-port`, while jobs run: the counters move by exactly what the
jobs did."""

from __future__ import annotations

import os
import signal
import sys
import time

import httpx
import pytest
from conftest import Proc, _env, free_port
from prometheus_client.parser import text_string_to_metric_families
from service_helpers import wait_done, wait_for

JOB = {"prompt": "a red circle", "model": "tiny", "seconds": "2", "size": "32x32", "steps": 2}
SLOW = {"prompt": "a slow blue square", "model": "tiny", "seconds": "6", "size": "128x128", "steps": 4}


def scrape(url: str, headers: dict | None = None) -> list[tuple[str, dict, float]]:
    r = httpx.get(url, headers=headers or {}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(r.text) for s in f.samples]


def value(samples, name: str, **labels) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when none)."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items()))


def present(samples, name: str, **labels) -> bool:
    return any(n == name and all(lab.get(k) == w for k, w in labels.items()) for n, lab, _ in samples)


def run_jobs_and_check(c: httpx.Client, metrics_url: str, headers: dict | None = None, n: int = 3,
                       api_url: str | None = None) -> None:  # fmt: skip
    """`n` jobs: the completed counter, histograms and segment counter move by exactly their work
    (the worker's, at `metrics_url`), and so does the store's gauge (the API's, at `api_url`)."""
    api_url = api_url or metrics_url
    before, api_before = scrape(metrics_url, headers), scrape(api_url, headers)
    jobs = [c.post("/v1/videos", json={**JOB, "seed": i}).json() for i in range(n)]
    done = [wait_done(c, j["id"]) for j in jobs]
    assert all(d["status"] == "completed" for d in done), done
    steps = sum(d["steps_total"] for d in done)
    segments = sum(d["segments_total"] for d in done)
    assert steps == n * 2 * done[0]["segments_total"] and segments >= n
    # The worker's counters follow the store's `completed` by a moment (it records after finishing).
    deadline = time.monotonic() + 10
    while True:
        after = scrape(metrics_url, headers)
        moved = value(after, "videogen_worker_jobs_total", status="completed") - value(
            before, "videogen_worker_jobs_total", status="completed"
        )
        if moved >= n or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    def delta(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("videogen_worker_jobs_total", status="completed") == n
    assert delta("videogen_job_queued_seconds_count") == n
    assert delta("videogen_job_running_seconds_count", status="completed") == n
    assert delta("videogen_denoising_step_seconds_count", model="tiny") == steps  # steps x segments
    assert delta("videogen_denoising_step_seconds_sum", model="tiny") > 0
    assert delta("videogen_segments_rendered_total") == segments
    assert delta("videogen_segments_retried_total") == 0
    api_after = scrape(api_url, headers)
    assert (
        value(api_after, "videogen_jobs", status="completed", tenant="alpha")
        == value(api_before, "videogen_jobs", status="completed", tenant="alpha") + n
    )
    assert present(after, "videogen_worker_model_loaded", model="tiny", device="cpu")
    assert present(after, "videogen_worker_up")
    assert not present(after, "videogen_gpu_memory_allocated_bytes")  # CPU: no GPU gauges


def check_queue_and_cancel(c: httpx.Client, metrics_url: str, headers: dict | None = None) -> None:
    """While a slow job runs with two behind it: busy 1, queue depth 2; a cancel is counted once."""
    before = scrape(metrics_url, headers)
    slow = c.post("/v1/videos", json=SLOW).json()
    waiting = [c.post("/v1/videos", json={**JOB, "seed": 10 + i}).json() for i in range(2)]
    wait_for(c, slow["id"], lambda v: v["steps_done"] >= 1, interval=0.05)
    during = scrape(metrics_url, headers)
    assert value(during, "videogen_queue_depth") == 2
    assert value(during, "videogen_jobs", status="queued", tenant="alpha") == 2
    assert value(during, "videogen_jobs", status="in_progress", tenant="alpha") == 1
    assert value(during, "videogen_worker_busy") == 1
    c.post(f"/v1/videos/{slow['id']}/cancel")
    for w in waiting:
        c.post(f"/v1/videos/{w['id']}/cancel")
    assert wait_done(c, slow["id"])["status"] == "cancelled"
    deadline = time.monotonic() + 10
    while value(after := scrape(metrics_url, headers), "videogen_worker_busy") != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (
        value(after, "videogen_worker_jobs_total", status="cancelled")
        - value(before, "videogen_worker_jobs_total", status="cancelled")
        == 1
    )  # the running one; the queued ones never reached a worker
    assert value(after, "videogen_jobs", status="cancelled", tenant="alpha") == 3
    assert value(after, "videogen_queue_depth") == 0 and value(after, "videogen_worker_busy") == 0


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_api_metrics_include_the_embedded_worker(serve, mode):
    env = {"VIDEOGEN_EMBEDDED_WORKER": mode}
    headers = None
    if mode == "thread":  # also: a metrics token restricts /metrics
        env["VIDEOGEN_METRICS_TOKEN"] = "scrape-me"
        headers = {"Authorization": "Bearer scrape-me"}
    server = serve(extra_env=env)
    url = server.url + "/metrics"
    if headers:
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer key-alpha"}).status_code == 401
    with server.client() as c:
        run_jobs_and_check(c, url, headers)
        check_queue_and_cancel(c, url, headers)
    text = httpx.get(url, headers=headers or {}).text
    assert "key-alpha" not in text and "a red circle" not in text  # no keys, no prompts
    if mode == "process":
        check_child_restart_keeps_counters(server, url)


def check_child_restart_keeps_counters(server, url: str) -> None:
    """The embedded child killed and restarted: its counters stay in the API's /metrics, its live
    gauges go with it and the new child's appear."""
    before = scrape(url)
    up = [lab for n, lab, v in before if n == "videogen_worker_up" and v == 1]
    assert len(up) == 1 and up[0]["worker"].startswith("embedded@"), up
    old_pid = int(up[0]["pid"])
    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        after = scrape(url)
        pids = {lab["pid"] for n, lab, v in after if n == "videogen_worker_up" and v == 1}
        if pids and str(old_pid) not in pids:
            break
        assert time.monotonic() < deadline, pids
        time.sleep(0.2)
    for name, labels in (("videogen_worker_jobs_total", {"status": "completed"}),
                         ("videogen_denoising_step_seconds_count", {}), ("videogen_segments_rendered_total", {})):  # fmt: skip
        assert value(after, name, **labels) == value(before, name, **labels) > 0, name
    assert not any(lab.get("pid") == str(old_pid) for n, lab, _ in after if n.startswith("videogen_worker_"))


def test_a_celery_worker_serves_its_metrics_port(serve, fleet_env, service_env, tmp_path):
    server = serve(extra_env=fleet_env)
    port = free_port()
    worker = Proc([sys.executable, "-m", "videogen.cli", "worker", "--metrics-port", str(port), "--metrics-host",
                   "127.0.0.1", "--name", f"metrics-{port}@%h"], _env({**service_env, **fleet_env}),
                  tmp_path / "worker.log")  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                if present(scrape(url), "videogen_worker_up") and "ready." in worker.output():
                    break
            except httpx.HTTPError:
                pass
            assert worker.p.poll() is None and time.monotonic() < deadline, worker.output()
            time.sleep(0.2)
        with server.client() as c:
            run_jobs_and_check(c, url, n=2, api_url=server.url + "/metrics")
        api = scrape(server.url + "/metrics")
        assert value(api, "videogen_jobs", status="completed", tenant="alpha") == 2
        assert present(api, "videogen_broker_backlog")  # fleet: the wake-ups waiting in Redis
        assert not present(api, "videogen_worker_up")  # the fleet's workers serve their own
        up = [lab for n, lab, v in scrape(url) if n == "videogen_worker_up" and v == 1]
        assert len(up) == 1 and up[0]["worker"].startswith("celery@")
    finally:
        worker.stop()


def test_a_worker_metrics_port_in_use_is_a_one_line_error(fleet_env, service_env, tmp_path):
    import socket

    (tmp_path / "data").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = Proc([sys.executable, "-m", "videogen.cli", "worker", "--metrics-port", str(port), "--metrics-host",
                  "127.0.0.1"], _env({**service_env, **fleet_env}), tmp_path / "w.log")  # fmt: skip
        try:
            assert w.p.wait(60) == 2
        finally:
            w.stop()
    errors = [line for line in w.output().splitlines() if line.startswith("videogen worker: error")]
    assert len(errors) == 1 and f"metrics port 127.0.0.1:{port}" in errors[0], w.output()


def test_the_grafana_dashboard_is_valid_and_names_only_our_metrics():
    import json
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    dashboard = json.loads((repo / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(dashboard["panels"]) >= 10 and all(exprs)
    source = (repo / "api" / "metrics.py").read_text() + (repo / "workers" / "metrics.py").read_text()
    for name in {n for e in exprs for n in re.findall(r"videogen_[a-z_]+", e)}:
        base = re.sub(r"_(total|bucket|count|sum)$", "", name)
        assert f'"{base}"' in source or f'"{name}"' in source, name
