"""`ServiceSettings`: the one object the job service reads its configuration from.

Environment variables use the `VIDEOGEN_` prefix, except the two URLs every deployment tool
already knows: `DATABASE_URL` and `REDIS_URL`.

    VIDEOGEN_DATA_DIR        outputs, checkpoints and the default SQLite file (~/.local/share/videogen)
    DATABASE_URL             SQLAlchemy URL; default sqlite:///<data_dir>/jobs.db
    REDIS_URL                set = fleet mode (Celery over Redis); unset = embedded worker
    VIDEOGEN_API_KEYS        "key1:tenantA,key2:tenantB" (kept only as SHA-256 hashes after load)
    VIDEOGEN_MODELS          "name=/abs/folder,..." extra models the operator serves, besides presets
    VIDEOGEN_DEFAULT_MODEL   model used when a request names none ("" = the preset default)
    VIDEOGEN_TENANT_MAX_RUNNING, _MAX_QUEUED, _RATE, _BURST   per-tenant fair-share limits (0 = none)
    VIDEOGEN_TENANT_WEIGHTS  "tenantA:2,..." turns per round in fair-share dispatch (default 1)
    VIDEOGEN_WEBHOOKS, _WEBHOOK_SECRET(S), _WEBHOOK_ALLOW_HOSTS   webhook deliveries (`api.webhooks`)
    VIDEOGEN_METRICS_TOKEN   set: `/metrics` needs `Authorization: Bearer <token>`
    VIDEOGEN_STORAGE_URL     "s3://bucket/prefix": outputs in a bucket (AWS_ENDPOINT_URL, AWS_* credentials)
    VIDEOGEN_LORA_DIR        the folder whose LoRA files (.safetensors) requests may name in `loras` (unset: none)
"""

from __future__ import annotations

import hashlib
import ipaddress
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VIDEOGEN_", extra="ignore", populate_by_name=True)

    data_dir: Path = Path("~/.local/share/videogen")
    # Below this much free space on the data dir's disk the server is not ready and refuses creates
    # (503 storage_error) instead of failing renders half-way (`OutputStorage.problem`).
    min_free_bytes: int = 1 << 30
    database_url: str | None = Field(None, validation_alias=AliasChoices("DATABASE_URL", "VIDEOGEN_DATABASE_URL"))
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "VIDEOGEN_REDIS_URL"))
    api_keys: str = Field("", repr=False)  # "key:tenant,..."; see `tenant_by_key_hash`
    no_auth: bool = False  # every request is tenant "local"; `videogen serve` allows it on loopback only
    models: str = ""  # "name=/abs/path,..." operator-configured diffusers folders
    default_model: str = ""
    # The operator-approved LoRA adapters: a request's `loras[].name` is a file inside this folder
    # (`videogen.config.spec.approved_lora`); "": requests may name none.
    lora_dir: str = ""
    device: str = "auto"  # where workers render
    dtype: str = "auto"
    queue: str = "videogen"  # Celery queue name
    max_upload_bytes: int = 10 * 1024 * 1024
    # Per text field (prompt, negative_prompt, shots[].prompt, a stream's prompt switch): Wan's
    # text encoder reads 512 tokens (about 2,000 English characters) and drops the rest.
    max_prompt_chars: int = 4000
    log_format: Literal["text", "json"] = "text"  # `--log-format`; json: one object per line (`api.logs`)
    max_seconds: float = 600.0  # per job; the library's own cap is an hour
    # Admission control (`api.admission`): a model whose preset sets no such limit (`limits:` in
    # configs/models.yaml; a VIDEOGEN_MODELS folder has none) admits frames up to this many pixels
    # (720p) and jobs up to this much work (width x height x frames x steps: 27 s of 720p at 16 fps
    # and 50 steps).
    max_frame_pixels: int = 1280 * 720
    max_job_work: int = 20_000_000_000
    output_ttl_seconds: int = 7 * 24 * 3600  # expires_at = finished_at + this
    lease_seconds: float = 60.0  # a worker renews its lease every lease_seconds/4
    # ... and asks the store this often whether its job was cancelled (or deleted); the render
    # reads the answer between transformer blocks, so a cancel stops it within this plus one block.
    cancel_poll_seconds: float = 0.5
    reaper_interval_seconds: float = 10.0  # requeue jobs whose lease expired; purge expired outputs
    worker_poll_seconds: float = 1.0  # embedded worker: idle poll (a create wakes it at once)
    # Embedded mode: "process" renders in a child process (the API process never imports torch and
    # keeps its GIL: see benchmarks/api_load.py), "thread" in a thread of the API process.
    embedded_worker: Literal["process", "thread"] = "process"
    embedded_worker_nice: int = 10  # the render is batch work: the API's requests go first on a busy CPU
    torch_threads: int = 1  # torch threads per worker (0 = torch's default): leaves the API a core
    # Celery/Redis: a message not acked within this is delivered again. It must exceed the longest
    # render (hours for a long 14B video); the store's lease makes a redelivery harmless anyway.
    visibility_timeout: int = 12 * 3600
    # Live streams (`api.spool`): the frames a stream job keeps on disk for its viewers, a ring of
    # recent frames (64 MiB: ~19 min of 64x64 video at 16 fps, measured 3.6 KB per JPEG frame from
    # the untrained model, whose noise compresses worst; larger frames proportionally less), and
    # how long the spool of a finished stream stays for late viewers (`?from=0`) before the
    # reaper removes it.
    stream_spool_bytes: int = 64 * 1024 * 1024
    stream_spool_keep_seconds: float = 60.0
    # Fair share between tenants (`api.quotas`, `JobStore.next_queued`); 0 = no limit. Workers
    # always take tenants in turn; these cap one tenant's share. Running: its jobs beyond the cap
    # wait in the queue (dispatch skips the tenant). Queued and rate: a create over them is a 429
    # with Retry-After. The rate is a token bucket per API process (`tenant_burst` creates at once,
    # refilled at `tenant_rate` per minute): with N API processes a tenant gets up to N times it.
    tenant_max_running: int = 0
    tenant_max_queued: int = 0
    tenant_rate: float = 0.0  # creates per minute
    tenant_burst: int = 0  # bucket size; 0 = max(1, tenant_rate / 6), i.e. 10 s of the rate
    tenant_weights: str = ""  # "tenantA:2,tenantB:0.5": turns per round in dispatch (default 1)
    # Webhooks (`api.webhooks`, docs/service.md "Webhooks"): a tenant's default URL, the signing
    # secrets (`whsec_<base64>`; a tenant's own, else the server-wide one), the hosts a URL may name
    # besides public https ones, the waits between attempts (s; one more attempt after each), the
    # timeout of one attempt and how often the sender looks for due deliveries.
    webhooks: str = ""  # "tenantA=https://hooks.example.com/videogen,..."
    webhook_secret: str = Field("", repr=False)
    webhook_secrets: str = Field("", repr=False)  # "tenantA=whsec_...,..."
    webhook_allow_hosts: str = ""  # "127.0.0.1,hooks.internal": any scheme, any address
    webhook_retry_seconds: str = "5,30,120,600,1800,3600,7200,14400,28800,28800"  # ~24 h in all, 11 attempts
    webhook_timeout_seconds: float = 5.0
    webhook_poll_seconds: float = 1.0
    # `/metrics` (`api.metrics`): open to anyone who reaches the port unless a token is set
    # (then `Authorization: Bearer <token>`). Worker processes: `videogen worker --metrics-port`.
    metrics_token: str = Field("", repr=False)
    worker_metrics_port: int = 0  # a Celery worker serves its /metrics on this port (0: none)
    worker_metrics_host: str = "0.0.0.0"
    # Model-aware routing (`api.routing`, docs/service.md "Routing"): the models a Celery worker serves
    # ("a,b"; "" = any: `videogen worker --model`), its model cache (GiB; 0 = one model on CUDA,
    # unbounded elsewhere: `--model-cache-gb`), how often it tells the store it is alive (3 beats
    # missed: down), and how long a silent worker's models still count as served (their jobs are
    # queued with a reason) before a create for them is a 400.
    worker_models: str = ""
    model_cache_gb: float = Field(0.0, ge=0)
    worker_heartbeat_seconds: float = Field(10.0, gt=0)
    worker_forget_seconds: float = Field(600.0, gt=0)
    # Outputs in an S3-compatible bucket ("s3://bucket/prefix"; endpoint, credentials and region from the
    # usual AWS variables) instead of only the data dir (`api.s3storage`). `/content` streams from it, or
    # with `storage_redirect` answers 307 to a presigned URL valid `storage_redirect_seconds`.
    storage_url: str = ""
    storage_redirect: bool = False
    storage_redirect_seconds: int = Field(300, ge=1, le=7 * 24 * 3600)

    @cached_property
    def tenant_by_key_hash(self) -> dict[str, str]:
        """SHA-256(key) -> tenant. The raw keys are not kept anywhere else."""
        table = {}
        for item in filter(None, (s.strip() for s in self.api_keys.split(","))):
            key, sep, tenant = item.rpartition(":")
            if not sep or not key or not tenant:
                raise ValueError("VIDEOGEN_API_KEYS: expected 'key:tenant,key2:tenant2'")
            table[hash_key(key)] = tenant
        return table

    @cached_property
    def tenant_weight_table(self) -> dict[str, float]:
        """`tenant_weights` parsed: tenant -> weight (> 0)."""
        table = {}
        for item in filter(None, (s.strip() for s in self.tenant_weights.split(","))):
            tenant, sep, weight = item.rpartition(":")
            try:
                value = float(weight)
            except ValueError:
                value = 0.0
            if not sep or not tenant or not value > 0 or value == float("inf"):
                raise ValueError(f"VIDEOGEN_TENANT_WEIGHTS: expected 'tenant:weight,...' (weight > 0): {item!r}")
            table[tenant] = value
        return table

    @cached_property
    def model_folders(self) -> dict[str, Path]:
        table = {}
        for item in filter(None, (s.strip() for s in self.models.split(","))):
            name, sep, folder = item.partition("=")
            if not sep or not name or not Path(folder).expanduser().is_absolute():
                raise ValueError("VIDEOGEN_MODELS: expected 'name=/absolute/folder,...'")
            table[name.strip()] = Path(folder).expanduser()
        return table

    @property
    def data_path(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_path / 'jobs.db'}"

    @property
    def fleet(self) -> bool:
        return bool(self.redis_url)
