"""`ModelCache`: a worker loads each model once and keeps it for the life of the process, keyed by
everything that changes the loaded weights or kernels: (model, device, dtype, attention)."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("videogen.worker")


class ModelCache:
    """`torch_threads` (> 0) caps torch's intra-op threads for the process before the first load:
    on a shared CPU, torch's default (one per core) beside other busy processes oversubscribes
    the cores; measured on the 2-core dev box under load, a 128x128 tiny render went from ~3 s
    to ~30 s. On a GPU it makes no difference."""

    def __init__(self, torch_threads: int = 0) -> None:
        self._models: dict[tuple[str, str, str, str | None], object] = {}
        self._lock = threading.Lock()
        self._threads = torch_threads

    def get(self, model: str, *, device: str, dtype: str, attention: str | None):
        from videogen.models.loader import load_model

        key = (model, device, dtype, attention)
        with self._lock:
            if key not in self._models:
                if self._threads > 0:
                    import torch

                    torch.set_num_threads(self._threads)
                t0 = time.perf_counter()
                self._models[key] = load_model(model, device=device, dtype=dtype, attention=attention)
                log.info("loaded model %s (%s, %s, attention %s) in %.1f s", model, device, dtype, attention,
                         time.perf_counter() - t0)  # fmt: skip
            return self._models[key]

    def __len__(self) -> int:
        return len(self._models)
