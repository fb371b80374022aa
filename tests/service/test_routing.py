"""Model-aware routing in a fleet (`api.routing`): real Redis, `videogen serve` in fleet mode and
real `videogen worker --model ...` processes serving different tiny models; and the bounded,
least-recently-used model cache of a worker (`workers.models.ModelCache`).

The workers are started once for the module (two at once: `w1` serves `tiny-a`, `w2` serves
`tiny-a` and `tiny-b`; `tiny-c` is a model of the catalog nobody serves) and the tests run in file
order: the later ones stop workers and start one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from service_helpers import presets_yaml, tiny_preset, wait_done

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300  # s: a worker's first job imports torch and diffusers, ~1 min on the loaded 2-core box
JOB = {"prompt": "a red circle moving right", "seconds": "2", "size": "32x32"}


class Proc:
    """A `videogen worker` process; its output goes to a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log, self._fh = log, open(log, "wb")
        self.p = subprocess.Popen(args, env=env, cwd=REPO, stdout=self._fh, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip

    def stop(self) -> None:  # SIGTERM: Celery's warm shutdown
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(10)
        self._fh.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Fleet:
    def __init__(self, root, env, make_server) -> None:
        from videogen.api.store import JobStore

        self.root, self.env = root, env
        self.workers: dict[str, Proc] = {}
        self.server = make_server(root / "data", root / "server.log", extra_env=env)
        self.store = JobStore(env["DATABASE_URL"])

    def start_workers(self, **models: str) -> None:
        """name=model, ...: started together, waited on until each says `ready.`."""
        started = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_") and k != "DATABASE_URL"}
        env.update(self.env, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        for name, served in models.items():
            args = [sys.executable, "-m", "videogen.cli", "worker", *(f"--model={m}" for m in served.split(",")),
                    "--log-level", "info", "--name", f"{name}-{uuid.uuid4().hex[:6]}@%h"]  # fmt: skip
            started[name] = Proc(args, env, self.root / f"{name}.log")
        deadline = time.monotonic() + 240
        for name, w in started.items():
            while "ready." not in w.output():
                if w.p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {name} did not start:\n{w.output()}")
                time.sleep(0.1)
            self.workers[name] = w

    def stop(self, name: str) -> None:
        self.workers.pop(name).stop()

    def ran_on(self, video_id: str) -> str:
        """The name of the worker that completed the job (its worker id holds the process id)."""
        finished_by = self.store.get_any(video_id).finished_by
        names = [n for n, w in self.workers.items() if f":{w.p.pid}:" in (finished_by or "")]
        assert len(names) == 1, (finished_by, {n: w.p.pid for n, w in self.workers.items()})
        return names[0]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, redis_url, make_server, service_env, tiny_model):
    root = tmp_path_factory.mktemp("routing")
    config = root / "config"
    config.mkdir()
    # Routing is by public name, and each name is a separate model to a worker's cache: the tiny
    # Wan folder under three names.
    presets = (tiny_preset(tiny_model, name=f"tiny-{x}") for x in "abc")
    (config / "models.yaml").write_text(presets_yaml(*presets, default="tiny-a"))
    env = {**service_env, "VIDEOGEN_CONFIG_DIR": str(config), "REDIS_URL": redis_url,
           "VIDEOGEN_QUEUE": f"videogen-routing-{uuid.uuid4().hex[:8]}",
           "DATABASE_URL": f"sqlite:///{root / 'data' / 'jobs.db'}", "VIDEOGEN_DATA_DIR": str(root / "data"),
           "VIDEOGEN_WORKER_HEARTBEAT_SECONDS": "0.5",
           # No lease runs out here (the conftest's 2 s ones do under a heavy load, and another worker
           # of the model would take the job over): which worker ran a job must be the one routed to.
           "VIDEOGEN_LEASE_SECONDS": "60"}  # fmt: skip
    (root / "data").mkdir()
    f = Fleet(root, env, make_server)
    try:
        f.start_workers(w1="tiny-a", w2="tiny-a,tiny-b")
        yield f
    finally:
        for w in [*f.workers.values(), f.server]:
            w.stop()


@pytest.fixture
def client(fleet):
    with fleet.server.client() as c:
        yield c


def _create(client, model: str) -> dict:
    r = client.post("/v1/videos", json={**JOB, "model": model})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_job_runs_only_on_a_worker_that_serves_its_model(fleet, client):
    jobs = [_create(client, m) for m in ("tiny-b", "tiny-a", "tiny-b", "tiny-a")]
    assert all(j["queued_reason"] is None for j in jobs)  # live workers serve both models
    for j in jobs:
        assert wait_done(client, j["id"], timeout=TIMEOUT)["status"] == "completed"
    ran = {j["id"]: fleet.ran_on(j["id"]) for j in jobs}
    assert [ran[j["id"]] for j in jobs if j["model"] == "tiny-b"] == ["w2", "w2"]
    assert {ran[j["id"]] for j in jobs if j["model"] == "tiny-a"} <= {"w1", "w2"}
    assert "loaded model tiny-b" not in fleet.workers["w1"].output()  # nor did w1 ever load it


def test_a_model_no_worker_serves_is_a_400_naming_model(client):
    r = client.post("/v1/videos", json={**JOB, "model": "tiny-c"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "model" and error["code"] == "model_not_served"
    assert "'tiny-c'" in error["message"] and "tiny-a, tiny-b" in error["message"]
    assert client.get("/v1/videos").json()["data"][0]["model"] != "tiny-c"  # nothing was stored


def test_an_extension_runs_on_the_worker_that_rendered_its_source(fleet, client):
    source = _create(client, "tiny-a")
    assert wait_done(client, source["id"], timeout=TIMEOUT)["status"] == "completed"
    home = fleet.ran_on(source["id"])
    # The other worker has waited on tiny-a's queue longer, so Redis would hand it the next wake-up
    # on that queue: each extension must have been sent to the source's worker's own queue.
    previous = source
    for n in range(3):
        r = client.post("/v1/videos/extensions", json={"prompt": f"then more {n}", "seconds": 1,
                                                        "video": {"id": previous["id"]}})  # fmt: skip
        assert r.status_code == 200, r.text
        previous = r.json()
        assert wait_done(client, previous["id"], timeout=TIMEOUT)["status"] == "completed"
        assert fleet.ran_on(previous["id"]) == home


def test_an_extension_falls_back_to_another_worker_of_its_model_when_its_source_worker_is_gone(fleet, client):
    source = _create(client, "tiny-a")
    assert wait_done(client, source["id"], timeout=TIMEOUT)["status"] == "completed"
    home = fleet.ran_on(source["id"])
    fleet.stop(home)  # SIGTERM: marked stopped in the registry at once
    r = client.post("/v1/videos/extensions", json={"prompt": "after", "seconds": 1, "video": {"id": source["id"]}})
    assert r.status_code == 200 and r.json()["queued_reason"] is None, r.text  # the other tiny-a worker is live
    assert wait_done(client, r.json()["id"], timeout=TIMEOUT)["status"] == "completed"
    assert fleet.ran_on(r.json()["id"]) == ({"w1", "w2"} - {home}).pop()


def test_a_job_whose_workers_are_down_is_queued_with_a_reason_and_runs_when_one_starts(fleet, client):
    if "w2" in fleet.workers:  # tiny-b's only worker (the previous test stopped one of the two)
        fleet.stop("w2")
    assert set(fleet.workers) <= {"w1"}  # tiny-a only (unless the previous test stopped it)
    job = _create(client, "tiny-b")
    assert job["status"] == "queued"
    assert job["queued_reason"].startswith("no live worker serves model 'tiny-b'"), job
    time.sleep(2.0)  # reaper passes (0.5 s) re-dispatch it on tiny-b's queue; w1 (if up) must not take it
    waiting = client.get(f"/v1/videos/{job['id']}").json()
    assert waiting["status"] == "queued" and waiting["queued_reason"] == job["queued_reason"]
    fleet.start_workers(b2="tiny-b")
    done = wait_done(client, job["id"], timeout=TIMEOUT)
    assert done["status"] == "completed" and done["queued_reason"] is None
    assert fleet.ran_on(job["id"]) == "b2"


def test_the_model_cache_evicts_the_least_recently_used_model_within_its_budget(tiny_model):
    from videogen.workers.models import GIB, ModelCache

    a, b, c = str(tiny_model), "builtin", "builtin-causal"
    sizes = ModelCache(torch_threads=1)  # on a CPU without a budget: every model stays
    for m in (a, b, c):
        sizes.get(m, device="cpu", dtype="float32", attention=None)
    assert sizes.resident() == [a, b, c] and sizes.evictions == 0
    size = {k[0]: n for k, n in sizes._bytes.items()}
    assert all(n > 0 for n in size.values()) and size[b] > 10 * size[a], size  # the tiny Wan is far smaller

    budget = size[a] + max(size[b], size[c])  # room for the tiny Wan and one built-in model, not three
    cache = ModelCache(torch_threads=1, budget_gb=budget / GIB)
    get = lambda m: cache.get(m, device="cpu", dtype="float32", attention=None)
    for m in (a, b, c):  # sizes not known yet: each load first evicts everything else
        get(m)
        assert cache.resident() == [m]
    first_a = get(a)  # its size is known now: it fits beside c
    assert cache.resident() == [c, a]
    get(b)  # c is the least recently used
    assert cache.resident() == [a, b] and cache.resident_bytes <= budget
    assert get(a) is first_a  # a hit: a becomes the most recently used ...
    get(c)  # ... so b goes, not a (first in, first out would have evicted a)
    assert cache.resident() == [a, c] and cache.resident_bytes <= budget
    assert get(a) is first_a and cache.evictions == 4  # b, c, c, b


def test_the_registry_tells_served_down_and_unknown_models_apart(db_url):
    from videogen.api.routing import ModelNotServed, WorkerRegistry
    from videogen.api.store import JobStore
    from videogen.api.tables import Job, new_job_id

    store = JobStore(db_url)
    registry = WorkerRegistry(store, "q", heartbeat_seconds=60, forget_seconds=600)  # alive: seen in 3 min
    assert registry.check("a") == "no worker has registered with this server yet"
    registry.heartbeat("w-a", ("a",))
    registry.heartbeat("w-b", ("b",))
    WorkerRegistry(store, "other-fleet").heartbeat("w-c", ("c",))  # another VIDEOGEN_QUEUE: not ours
    assert registry.check("a") is None and registry.is_alive("w-a")
    with pytest.raises(ModelNotServed, match=r"'c' is not served .* \(served: a, b\)"):
        registry.check("c")

    registry.stopped("w-b")  # a clean shutdown: down at once, still remembered
    assert not registry.is_alive("w-b")
    reason = registry.check("b")
    assert reason.startswith("no live worker serves model 'b' (one was last seen at ")
    job = Job(id=new_job_id(), tenant="t", model="b", prompt="p", seconds="1", size="32x32", spec={})
    store.create(job)
    registry.refresh_reasons(store.queued_models())
    assert store.get_any(job.id).queued_reason == reason
    assert store.set_queued_reason("b", reason) == 0  # unchanged: no write
    impatient = WorkerRegistry(store, "q", heartbeat_seconds=0.01)  # the same rows, down after 30 ms of silence
    time.sleep(0.1)
    assert not impatient.is_alive("w-a") and impatient.check("a").startswith("no live worker serves model 'a'")

    registry.heartbeat("w-b", ("b",))  # back
    registry.refresh_reasons(store.queued_models())
    assert store.get_any(job.id).queued_reason is None
    assert store.next_queued(models=("a",)) == [] and store.next_queued(models=("a", "b")) == [job.id]

    registry.heartbeat("w-any", None)  # an any-model worker serves every model
    assert registry.check("c") is None
    assert registry.forget(now=time.time() + 601) == 4 and registry.workers() == []
