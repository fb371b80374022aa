"""LoRA adapters on a loaded model's transformer, per request, through diffusers' Wan LoRA loader.

    with lora_adapters(model, [Lora("causvid.safetensors", 0.5)]):
        ...  # every transformer call sees W + 0.5 * (alpha/r) B A on the adapted linears

A file in the original Wan repository's names (`diffusion_model.blocks.0.self_attn.q.lora_A.weight`,
or `lora_down`/`lora_up` with an `alpha`, as CausVid's and the step-distillation LoRAs ship) or in
diffusers' (`transformer.blocks.0.attn1.to_q.lora_A.weight`) is read and renamed by diffusers'
`WanLoraLoaderMixin.lora_state_dict`, checked against the transformer here (the first key that
names no linear layer of the model, or has another shape, is the error), and injected with PEFT
(`load_lora_adapter`) under a name derived from the file's path, size and modification time.

Adapters stay loaded on the transformer (up to `MAX_CACHED_ADAPTERS`, least recently used
dropped), so a worker that keeps its model (`videogen.workers.models.ModelCache`) switches
between requests' LoRAs without reloading anything. `lora_adapters` activates the request's set
at its scales and disables every adapter on exit: between requests a cached model is the base
model (PEFT's disabled layers call the base layer alone, so its output is bit-identical). A lock
per transformer keeps two threads from activating different sets on one model at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from videogen.config.spec import Lora
from videogen.errors import InvalidOption

MAX_CACHED_ADAPTERS = 8  # per transformer; a rank-32 LoRA of Wan 1.3B is ~80 MB in fp32
_LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight", ".lora_B.bias")


@dataclass
class _AdapterCache:
    """The adapters loaded into one transformer: PEFT adapter name -> file, least recently used first."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    loaded: OrderedDict[str, str] = field(default_factory=OrderedDict)


_CACHES: weakref.WeakKeyDictionary[torch.nn.Module, _AdapterCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _cache_of(transformer: torch.nn.Module) -> _AdapterCache:
    with _CACHES_LOCK:
        cache = _CACHES.get(transformer)
        if cache is None:
            cache = _CACHES[transformer] = _AdapterCache()
        return cache


def load_loras(model: Any, loras: Sequence[Lora]) -> None:
    """Load every one of `loras` that `model.transformer` does not hold yet (left inactive), so a
    file that does not fit the model is reported before anything is rendered. Raises InvalidOption."""
    if not loras:
        return
    cache = _cache_of(_adaptable(model, loras))
    with cache.lock:
        _load_all(model.transformer, cache, loras)


@contextmanager
def lora_adapters(model: Any, loras: Sequence[Lora]) -> Iterator[None]:
    """Inside: `model.transformer` runs with `loras` at their scales (none: the base model).
    On exit every adapter is disabled again; loaded ones stay cached. Raises InvalidOption."""
    transformer = model.transformer
    if not loras and _CACHES.get(transformer) is None:  # never adapted: the base model as it is
        yield
        return
    cache = _cache_of(_adaptable(model, loras) if loras else transformer)
    with cache.lock:
        try:
            names = _load_all(transformer, cache, loras)
            if names:
                transformer.set_adapters(names, weights=[float(lora.scale) for lora in loras])
                transformer.enable_lora()
            yield
        finally:
            if cache.loaded:
                transformer.disable_lora()


def adapter_name(path: str) -> str:
    """PEFT's name for the adapter in `path`: a changed file (size, mtime) is a new adapter."""
    st = os.stat(path)
    key = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"
    return "lora_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def read_lora(path: str) -> tuple[dict[str, torch.Tensor], dict | None]:
    """`path`'s LoRA in diffusers' names (`transformer.<module>.lora_A.weight`, ...) and its
    adapter metadata (rank, alpha) if the file has some. Raises InvalidOption."""
    from diffusers.loaders import WanLoraLoaderMixin

    try:
        with _quiet():
            state, metadata = WanLoraLoaderMixin.lora_state_dict(path, local_files_only=True,
                                                                 return_lora_metadata=True)  # fmt: skip
    except Exception as exc:  # safetensors, diffusers' converters: anything unreadable is the file's fault
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidOption("loras", path, f"is not a Wan LoRA diffusers can read ({first})") from None
    if state and not any(k.startswith(("transformer.", "text_encoder.")) for k in state):
        state = {f"transformer.{k}": v for k, v in state.items()}  # PEFT's own names, unprefixed
    return state, metadata


def lora_mismatch(state: dict[str, torch.Tensor], transformer: torch.nn.Module) -> str | None:
    """Why `state` (diffusers' names) cannot adapt `transformer`, naming the first key that does
    not fit; None when every key does."""
    if not state:
        return "it holds no LoRA weights"
    ranks: dict[str, int] = {}
    for key, tensor in state.items():
        if reason := _key_mismatch(key, tensor, transformer, ranks):
            return f"{key}: {reason}"
    return None


def _key_mismatch(key: str, tensor: torch.Tensor, transformer: torch.nn.Module, ranks: dict[str, int]) -> str | None:
    if not key.startswith("transformer."):
        return "not a transformer weight (only the transformer takes LoRAs)"
    stem = key[len("transformer.") :]
    suffix = next((s for s in _LORA_SUFFIXES if stem.endswith(s)), None)
    if suffix is None:
        return "not a LoRA weight (lora_A / lora_B)"
    module = stem[: -len(suffix)]
    try:
        layer = transformer.get_submodule(module)
    except AttributeError:
        return "the model has no such layer"
    layer = getattr(layer, "base_layer", layer)  # a linear that PEFT already wraps
    if not isinstance(layer, torch.nn.Linear):
        return "not a linear layer of the model"
    shape = tuple(tensor.shape)
    if suffix == ".lora_A.weight":  # (r, in)
        fits, rank = len(shape) == 2 and shape[1] == layer.in_features, shape[0] if len(shape) == 2 else None
    elif suffix == ".lora_B.weight":  # (out, r)
        fits, rank = len(shape) == 2 and shape[0] == layer.out_features, shape[1] if len(shape) == 2 else None
    else:  # (out,)
        fits, rank = shape == (layer.out_features,), None
    if not fits:
        return f"shape {list(shape)} does not fit the layer ({layer.in_features} -> {layer.out_features} features)"
    if rank is not None and ranks.setdefault(module, rank) != rank:
        return f"rank {rank} differs from the rank {ranks[module]} of the layer's other LoRA matrix"
    return None


def _adaptable(model: Any, loras: Sequence[Lora]) -> torch.nn.Module:
    """`model.transformer`, once it is clear it can take `loras`."""
    if model.transformer_2 is not None:  # which expert's? Published A14B LoRAs come one file per expert.
        raise InvalidOption("loras", loras[0].path, "LoRAs apply to one-transformer models; this model has two "
                            "experts (transformer_2)")  # fmt: skip
    try:
        import peft  # noqa: F401
    except ImportError:
        raise InvalidOption("loras", loras[0].path, "LoRA adapters need the peft package "
                            "(pip install 'videogen[lora]')") from None  # fmt: skip
    return model.transformer


def _load_all(transformer: torch.nn.Module, cache: _AdapterCache, loras: Sequence[Lora]) -> list[str]:
    """The adapter names of `loras`, loading those not cached (the caller holds `cache.lock`)."""
    names = []
    for lora in loras:
        name = adapter_name(lora.path)
        if name in cache.loaded:
            cache.loaded.move_to_end(name)
        else:
            _load_one(transformer, cache, name, lora.path)
        names.append(name)
    return names


def _load_one(transformer: torch.nn.Module, cache: _AdapterCache, name: str, path: str) -> None:
    state, metadata = read_lora(path)
    if reason := lora_mismatch(state, transformer):
        raise InvalidOption("loras", path, f"does not fit the model's transformer: {reason}")
    while len(cache.loaded) >= MAX_CACHED_ADAPTERS:
        oldest, _ = cache.loaded.popitem(last=False)
        transformer.delete_adapters(oldest)
    with _quiet():
        transformer.load_lora_adapter(state, adapter_name=name, prefix="transformer", metadata=metadata)
    cache.loaded[name] = path
    transformer.disable_lora()  # loaded, not active: `lora_adapters` activates per request


@contextmanager
def _quiet() -> Iterator[None]:
    """PEFT warns that a model with one adapter gets another, and diffusers lists the other adapters'
    weights as "missing" from each new one: both are expected here (every key was checked)."""
    from diffusers.utils import logging as diffusers_logging

    level = diffusers_logging.get_verbosity()
    diffusers_logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        diffusers_logging.set_verbosity(level)
