"""`ModelCache`: a worker loads each model once and keeps it while it fits, keyed by everything
that changes the loaded weights or kernels: (model, device, dtype, attention).

The cache is bounded, least recently used evicted first, so that a GPU worker asked for a 14B
model after a 1.3B one frees the 1.3B before it loads the 14B instead of running out of memory:

* `budget_gb` (`videogen worker --model-cache-gb`): the models' weights (parameters and buffers
  of their components, `resident_bytes`) stay within it. Before a load the least recently
  used models go until the new one's size fits; a model never loaded by this process has no
  size yet, so everything else goes first (its size is known after that, for the next time).
  A model larger than the budget alone is still loaded (the only one kept).
* no budget (the default): one model on CUDA (the GPU holds the model being used); unbounded on
  a CPU, whose RAM usually holds several and where a reload costs more than it saves.

Eviction drops the cache's reference, collects garbage and empties CUDA's caching allocator; a
render still using an evicted model keeps it alive until it ends.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

log = logging.getLogger("videogen.worker")

Key = tuple[str, str, str, "str | None"]
GIB = 1 << 30


def resident_bytes(model: Any) -> int:
    """Bytes of a loaded model's weights: parameters and buffers of its transformer(s), text
    encoder and VAE at their dtypes (`videogen.models.memory.model_components`)."""
    from videogen.models.memory import model_components

    return sum(c.bytes for c in model_components(model))


def _on_cuda(device: str) -> bool:
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    import torch

    return torch.cuda.is_available()


class ModelCache:
    """`torch_threads` (> 0) caps torch's intra-op threads for the process before the first load:
    on a shared CPU, torch's default (one per core) beside other busy processes oversubscribes
    the cores; measured on the 2-core dev box under load, a 128x128 tiny render went from ~3 s
    to ~30 s. On a GPU it makes no difference. `budget_gb`: see the module docstring."""

    def __init__(self, torch_threads: int = 0, budget_gb: float | None = None) -> None:
        self._models: OrderedDict[Key, object] = OrderedDict()  # least recently used first
        self._bytes: dict[Key, int] = {}  # resident size of every model this process has loaded
        self._lock = threading.Lock()
        self._threads = torch_threads
        self.budget = None if budget_gb is None else int(budget_gb * GIB)
        self.evictions = 0

    def get(self, model: str, *, device: str, dtype: str, attention: str | None):
        from videogen.models.loader import load_model

        key = (model, device, dtype, attention)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            if self._threads > 0:  # as `--threads` does (`videogen.config.threads`: waiting threads sleep)
                from videogen.config.threads import use_threads

                use_threads(self._threads)
            self._make_room(key)
            t0 = time.perf_counter()
            loaded = load_model(model, device=device, dtype=dtype, attention=attention)
            self._models[key] = loaded
            self._bytes[key] = resident_bytes(loaded)
            log.info("loaded model %s (%s, %s, attention %s, %.2f GiB) in %.1f s", model, device, dtype, attention,
                     self._bytes[key] / GIB, time.perf_counter() - t0)  # fmt: skip
            return loaded

    def _make_room(self, key: Key) -> None:
        """Evict least recently used models until `key`'s model fits (see the module docstring)."""
        if self.budget is None:
            if _on_cuda(key[1]):
                while self._models:
                    self._evict(f"one model on CUDA; loading {key[0]}")
            return
        need = self._bytes.get(key)
        while self._models and (need is None or self.resident_bytes + need > self.budget):
            self._evict(f"budget {self.budget / GIB:.2f} GiB; loading {key[0]}"
                        + ("" if need is not None else " (size unknown until loaded)"))  # fmt: skip

    def _evict(self, why: str) -> None:
        key, _ = self._models.popitem(last=False)
        self.evictions += 1
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        log.info("evicted model %s (%s, %s, attention %s, %.2f GiB): %s", *key, self._bytes[key] / GIB, why)

    @property
    def resident_bytes(self) -> int:
        return sum(self._bytes[k] for k in self._models)

    def resident(self) -> list[str]:
        """The models held, least recently used first."""
        return [k[0] for k in self._models]

    def __len__(self) -> int:
        return len(self._models)
