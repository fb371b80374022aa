"""Transformer checkpoints in the original Wan naming -> diffusers' `WanTransformer3DModel`.

Self-Forcing, CausVid and LongLive publish their autoregressive Wan-1.3B generators as torch files
of the original Wan repository's `WanModel` (Wan-Video/Wan2.1, `wan/modules/model.py`), usually
inside a training checkpoint: `{"generator_ema": {...}, "generator": {...}}` whose keys read
`model.blocks.0.self_attn.q.weight`, sometimes with FSDP / activation-checkpointing /
`torch.compile` segments (`_fsdp_wrapped_module.`, `_orig_mod.`) anywhere in a key. This module
unwraps such a file, renames its keys to diffusers' names, infers the transformer config from the
tensor shapes and builds the model; `load_model(..., checkpoint=FILE)` uses the same steps to swap
the weights of a diffusers folder's transformer.

The two namings differ in names only, never in shapes or layout. The one trap: the original's
`norm3` is the affine LayerNorm before cross-attention, which diffusers calls `norm2`; the other
norms (original `norm1`/`norm2`, diffusers `norm1`/`norm3`) have no parameters, so they never
appear in a state dict.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

# Where a training checkpoint keeps the generator's weights, searched in this order: the EMA
# weights are the ones the Self-Forcing / CausVid authors evaluate and publish.
CHECKPOINT_ENTRIES = ("generator_ema", "generator", "state_dict", "model", "module")
# Segments that wrappers insert into parameter names; they are never real module names.
_WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
# Leading prefixes of a wrapping module (Self-Forcing's `WanDiffusionWrapper.model`, DDP's `module`).
_WRAPPER_PREFIXES = ("model.", "module.")

# Original module -> diffusers module, outside the blocks (their `.weight` / `.bias` follow).
_TOP_MODULES = {
    "patch_embedding": "patch_embedding",  # Conv3d, kernel = stride = patch size
    "text_embedding.0": "condition_embedder.text_embedder.linear_1",  # Linear, GELU(tanh), Linear
    "text_embedding.2": "condition_embedder.text_embedder.linear_2",
    "time_embedding.0": "condition_embedder.time_embedder.linear_1",  # Linear, SiLU, Linear
    "time_embedding.2": "condition_embedder.time_embedder.linear_2",
    "time_projection.1": "condition_embedder.time_proj",  # SiLU, Linear(dim, 6 dim)
    "head.head": "proj_out",
    # I2V / FLF2V: CLIP image features -> LayerNorm, Linear, GELU, Linear, LayerNorm
    "img_emb.proj.0": "condition_embedder.image_embedder.norm1",
    "img_emb.proj.1": "condition_embedder.image_embedder.ff.net.0.proj",
    "img_emb.proj.3": "condition_embedder.image_embedder.ff.net.2",
    "img_emb.proj.4": "condition_embedder.image_embedder.norm2",
}
_TOP_PARAMETERS = {
    "head.modulation": "scale_shift_table",  # (1, 2, dim)
    "img_emb.emb_pos": "condition_embedder.image_embedder.pos_embed",  # FLF2V: (1, 2 x 257, image_dim)
}
# The same inside `blocks.N.`.
_BLOCK_MODULES = {
    "self_attn.q": "attn1.to_q",
    "self_attn.k": "attn1.to_k",
    "self_attn.v": "attn1.to_v",
    "self_attn.o": "attn1.to_out.0",
    "self_attn.norm_q": "attn1.norm_q",  # RMSNorm over all heads
    "self_attn.norm_k": "attn1.norm_k",
    "cross_attn.q": "attn2.to_q",
    "cross_attn.k": "attn2.to_k",
    "cross_attn.v": "attn2.to_v",
    "cross_attn.o": "attn2.to_out.0",
    "cross_attn.norm_q": "attn2.norm_q",
    "cross_attn.norm_k": "attn2.norm_k",
    "cross_attn.k_img": "attn2.add_k_proj",  # I2V: keys / values of the image tokens
    "cross_attn.v_img": "attn2.add_v_proj",
    "cross_attn.norm_k_img": "attn2.norm_added_k",
    "norm3": "norm2",  # the affine LayerNorm before cross-attention (cross_attn_norm=True)
    "ffn.0": "ffn.net.0.proj",  # Linear, GELU(tanh), Linear
    "ffn.2": "ffn.net.2",
}
_BLOCK_PARAMETERS = {"modulation": "scale_shift_table"}  # (1, 6, dim)


def _parameter_table(modules: dict[str, str], parameters: dict[str, str]) -> dict[str, str]:
    table = {f"{old}.{p}": f"{new}.{p}" for old, new in modules.items() for p in ("weight", "bias")}
    return table | parameters


_ORIGINAL_TO_DIFFUSERS = (
    _parameter_table(_TOP_MODULES, _TOP_PARAMETERS),
    _parameter_table(_BLOCK_MODULES, _BLOCK_PARAMETERS),
)
_DIFFUSERS_NAMES = tuple({name: name for name in table.values()} for table in _ORIGINAL_TO_DIFFUSERS)
_BLOCK_KEY = re.compile(r"blocks\.(\d+)\.(.+)")


def _rename(key: str, tables: tuple[dict[str, str], dict[str, str]]) -> str | None:
    """`key` through (top-level table, per-block table); None if the tables do not know it."""
    top, block = tables
    if m := _BLOCK_KEY.fullmatch(key):
        new = block.get(m[2])
        return None if new is None else f"blocks.{m[1]}.{new}"
    return top.get(key)


def _some(keys, n: int = 4) -> str:
    keys = sorted(keys)
    more = f" (and {len(keys) - n} more)" if len(keys) > n else ""
    return ", ".join(keys[:n]) + more


def wan_naming(state: Mapping[str, Any]) -> str:
    """ "original" or "diffusers": the naming a Wan transformer state dict uses. `patch_embedding.*`
    is the same in both, so a dict with nothing else counts as diffusers."""
    original = [
        k for k in state if _rename(k, _ORIGINAL_TO_DIFFUSERS) is not None and _rename(k, _DIFFUSERS_NAMES) is None
    ]
    diffusers = [
        k for k in state if _rename(k, _DIFFUSERS_NAMES) is not None and _rename(k, _ORIGINAL_TO_DIFFUSERS) is None
    ]
    if original and diffusers:
        raise ValueError(
            f"the state dict mixes original Wan names ({_some(original, 2)}) and diffusers names ({_some(diffusers, 2)})"
        )
    return "original" if original else "diffusers"


def convert_wan_original_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename an original-Wan `WanModel` state dict to `WanTransformer3DModel` keys (tensors are
    shared, not copied). A dict already in diffusers naming comes back unchanged. Raises ValueError
    naming keys that are no Wan transformer parameter."""
    naming = wan_naming(state)
    tables = _ORIGINAL_TO_DIFFUSERS if naming == "original" else _DIFFUSERS_NAMES
    converted, unknown = {}, []
    for key, value in state.items():
        new = _rename(key, tables)
        if new is None:
            unknown.append(key)
        else:
            converted[new] = value
    if unknown:
        where = f"in {naming} naming" if converted else "in either naming"
        raise ValueError(f"{len(unknown)} key(s) are not Wan transformer parameters {where}: {_some(unknown)}")
    return converted


def unwrap_checkpoint(obj: Any) -> tuple[dict[str, torch.Tensor], str]:
    """(state dict, where in `obj` it was found) from a loaded checkpoint: descends into the first
    of `CHECKPOINT_ENTRIES` present, so "generator_ema" says the EMA weights were taken (over any
    "generator"), "" that `obj` itself is the state dict; strips wrapper segments and prefixes."""
    entries = []
    while isinstance(obj, Mapping) and obj and not all(isinstance(v, torch.Tensor) for v in obj.values()):
        entry = next((e for e in CHECKPOINT_ENTRIES if e in obj), None)
        if entry is None:
            where = "/".join(entries) or "the file"
            raise ValueError(f"no transformer state dict in the checkpoint: {where} has keys {_some(map(str, obj))} "
                             f"(looked for tensors or one of {', '.join(CHECKPOINT_ENTRIES)})")  # fmt: skip
        entries.append(entry)
        obj = obj[entry]
    where = "/".join(entries) or "the file"
    if not isinstance(obj, Mapping):
        raise ValueError(f"no transformer state dict in the checkpoint: {where} holds a {type(obj).__name__}")
    if not obj:
        raise ValueError(f"no transformer state dict in the checkpoint: {where} is empty")
    state = {}
    for key, value in obj.items():
        for segment in _WRAPPER_SEGMENTS:
            key = key.replace(segment, "")
        state[key] = value
    if len(state) < len(obj):
        raise ValueError("the checkpoint holds the same parameter twice, with and without a wrapper's name segment")
    while prefix := next((p for p in _WRAPPER_PREFIXES if all(k.startswith(p) for k in state)), None):
        state = {k[len(prefix) :]: v for k, v in state.items()}
    return state, "/".join(entries)


def read_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], str]:
    """(state dict in diffusers naming, where in the file it was found) from a `.safetensors` or
    torch (`.pt`, `.pth`, `.bin`, ...) file. Raises OSError if the file cannot be read, ValueError
    if it holds no Wan transformer weights."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError("no such file")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            obj = load_file(str(path))
        except SafetensorError as exc:
            raise ValueError(f"not a readable safetensors file ({_first_line(exc)})") from None
    else:
        obj = _torch_load(path)
    state, entry = unwrap_checkpoint(obj)
    return convert_wan_original_state_dict(state), entry


def _torch_load(path: Path) -> Any:
    """torch.load with weights_only=True: tensors and containers only, so unpickling cannot run
    code. A training checkpoint that also pickled an object (its config, say) is refused unless
    VIDEOGEN_TRUST_CHECKPOINTS=1, and then loaded in full after a warning naming the object. Zip-format files
    (torch.save's default) are memory-mapped: of a Self-Forcing file holding "generator_ema",
    "generator" and more, only the weights used are read."""
    import pickle
    import warnings
    import zipfile

    mmap = zipfile.is_zipfile(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        if refused is None:
            raise ValueError("neither a torch file nor a .safetensors one") from None
    except (RuntimeError, EOFError) as exc:  # e.g. a truncated zip archive
        raise ValueError(f"not a readable torch file ({_first_line(exc)})") from None
    from videogen.config import environment

    if not environment.trust_checkpoints():
        raise ValueError(f"pickles {refused[1]}, which safe (weights-only) loading refuses; unpickling can run code "
                         f"from the file: set VIDEOGEN_TRUST_CHECKPOINTS=1 to load checkpoints you trust")  # fmt: skip
    warnings.warn(f"{path}: pickles {refused[1]}, which weights_only loading refuses; unpickling the "
                  f"whole file (VIDEOGEN_TRUST_CHECKPOINTS=1)", stacklevel=3)  # fmt: skip
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as exc:  # e.g. the pickled object's module is not installed here
        raise ValueError(f"not loadable here ({type(exc).__name__}: {_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _architecture(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What tensor shapes fix about a diffusers-named Wan transformer (all but the head split)."""

    def shape(key: str) -> tuple[int, ...]:
        if key not in state:
            raise ValueError(f"cannot infer the Wan config: the state dict has no {key!r}")
        return tuple(state[key].shape)

    width, in_channels, *patch = shape("patch_embedding.weight")  # (dim, C, pt, ph, pw)
    blocks = {int(m[1]) for k in state if (m := _BLOCK_KEY.fullmatch(k))}
    if not blocks:
        raise ValueError("cannot infer the Wan config: the state dict has no transformer blocks")
    arch = dict(
        width=width,
        patch_size=tuple(patch),
        in_channels=in_channels,
        out_channels=shape("proj_out.weight")[0] // math.prod(patch),  # head: dim -> C_out x pt x ph x pw
        text_dim=shape("condition_embedder.text_embedder.linear_1.weight")[1],
        freq_dim=shape("condition_embedder.time_embedder.linear_1.weight")[1],
        ffn_dim=shape("blocks.0.ffn.net.0.proj.weight")[0],
        num_layers=max(blocks) + 1,
        cross_attn_norm="blocks.0.norm2.weight" in state,
        image_dim=None,
        added_kv_proj_dim=None,
        pos_embed_seq_len=None,
    )
    if "condition_embedder.image_embedder.norm1.weight" in state:  # I2V / FLF2V: CLIP image tokens
        arch["image_dim"] = shape("condition_embedder.image_embedder.norm1.weight")[0]
        arch["added_kv_proj_dim"] = shape("blocks.0.attn2.add_k_proj.weight")[1]
    if "condition_embedder.image_embedder.pos_embed" in state:  # FLF2V: (1, 2 x 257, image_dim)
        arch["pos_embed_seq_len"] = shape("condition_embedder.image_embedder.pos_embed")[1]
    return arch


def infer_wan_config(state: Mapping[str, torch.Tensor], head_dim: int = 128) -> dict[str, Any]:
    """The `WanTransformer3DModel` config of a state dict (either naming), from tensor shapes.

    The head count is not in the weights (heads x head_dim = width): every Wan model uses 128-dim
    heads, so `head_dim` only needs changing for small test models. `rope_max_seq_len` is not in
    the weights either and keeps diffusers' default (1024), which every Wan model uses."""
    arch = _architecture(convert_wan_original_state_dict(state))
    width = arch.pop("width")
    if head_dim < 1 or width % head_dim:
        raise ValueError(f"`head_dim` must divide the model width {width}, but is {head_dim}")
    return dict(
        num_attention_heads=width // head_dim,
        attention_head_dim=head_dim,
        **arch,
        qk_norm="rms_norm_across_heads",  # every Wan model: RMSNorm over all heads' q and k
        eps=1e-6,
    )


def state_dict_mismatch(state: Mapping[str, torch.Tensor], model: torch.nn.Module) -> str | None:
    """None if `state` (diffusers naming) loads into `model` with strict=True, else one line saying
    why: the differing architecture (width, layers, ...) if the shapes tell it, else the keys."""
    expected = model.state_dict()
    try:
        ours, theirs = _architecture(state), _architecture(expected)
    except ValueError:
        ours = theirs = None
    if ours != theirs:
        diff = [k for k in theirs if ours[k] != theirs[k]]
        return ("the checkpoint's transformer has " + ", ".join(f"{k}={ours[k]}" for k in diff)
                + "; the model's has " + ", ".join(f"{k}={theirs[k]}" for k in diff))  # fmt: skip
    problems = []
    if missing := expected.keys() - state.keys():
        problems.append(f"missing {_some(missing)}")
    if unexpected := state.keys() - expected.keys():
        problems.append(f"unexpected {_some(unexpected)}")
    wrong = [k for k in state.keys() & expected.keys() if state[k].shape != expected[k].shape]
    if wrong:
        k = sorted(wrong)[0]
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        problems.append(
            f"wrong shape: {k} is {tuple(state[k].shape)} in the checkpoint, {tuple(expected[k].shape)} in the model{more}"
        )
    return "; ".join(problems) or None


def load_wan_original(path: str | Path, *, config: dict[str, Any] | None = None, head_dim: int = 128,
                      dtype: torch.dtype = torch.float32):  # fmt: skip
    """A `WanTransformer3DModel` (eval mode, on the CPU) from a checkpoint file in either naming.

    `config` (None = inferred from the shapes, see `infer_wan_config`) builds the model; the
    modules diffusers keeps in fp32 (time embedding, modulation tables, norms) stay fp32 whatever
    `dtype`, as `from_pretrained(torch_dtype=...)` does. Raises ValueError naming the file and
    what does not fit (FileNotFoundError if there is no such file)."""
    from accelerate import init_empty_weights
    from diffusers import WanTransformer3DModel

    path = Path(path)
    try:
        state, _entry = read_checkpoint(path)
        config = dict(config) if config is not None else infer_wan_config(state, head_dim)
    except (OSError, ValueError) as exc:
        raise type(exc)(f"{path}: {exc}") from None
    with init_empty_weights(include_buffers=False):  # parameters on "meta": filled by the checkpoint
        model = WanTransformer3DModel(**config)
    if reason := state_dict_mismatch(state, model):
        raise ValueError(f"{path}: does not fit the WanTransformer3DModel config: {reason}")
    keep_fp32 = set(model._keep_in_fp32_modules or ())
    for key in list(state):  # one tensor at a time: peak memory stays one model plus one tensor
        # Always a copy: safetensors' tensors are not 64-byte aligned, and unaligned weights take
        # other CPU kernels that round differently (5e-7 off on the tiny test model).
        state[key] = state.pop(key).to(torch.float32 if keep_fp32 & set(key.split(".")) else dtype, copy=True)
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()
