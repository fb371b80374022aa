"""Optimisers for training the built-in model: Muon for hidden weight matrices, AdamW for the rest.

Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers"; at scale: Liu et al. 2025,
"Muon is Scalable for LLM Training") takes SGD momentum of a weight matrix's gradient and
replaces it by the nearest semi-orthogonal matrix (U V^T of its SVD, approximated by a quintic
Newton-Schulz iteration), so every direction of the update moves at the same rate instead of the
few that dominate a raw gradient. Scaled by 0.2 * sqrt(max(rows, cols)) its per-entry RMS matches
an AdamW update's (Liu et al.), so the learning rate and schedule of an AdamW recipe carry over.

This implementation differs from `torch.optim.Muon` in two ways. It runs the iteration in fp32,
batched over matrices of one shape: for the built-in model's 53 matrices on a 2-core CPU without
native bf16 that is 46 ms a step against `torch.optim.Muon`'s 1,226 ms (docs/builtin-model.md).
And it orthogonalises a fused projection (attention's q/k/v in one `in_proj_weight`, Wan's six
modulation vectors in one `time_proj`) block by block, as the separate matrices they are.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict

import torch

from videogen.training.config import TrainConfig

# Quintic Newton-Schulz coefficients (Jordan et al.): a steep slope at 0 so that 5 steps take every
# singular value of a norm-1 matrix into ~[0.7, 1.2], which works as well as exactly 1.
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def orthogonalize(g: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """(..., m, n) -> the same shape with every matrix's singular values taken near 1 (U V^T),
    by `steps` Newton-Schulz iterations in fp32."""
    a, b, c = NS_COEFFICIENTS
    x = g.float()
    wide = x.shape[-2] <= x.shape[-1]
    if not wide:  # iterate on the wide orientation: the Gram matrix is then the smaller one
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp_min(eps)  # spectral norm <= Frobenius norm = 1
    for _ in range(steps):
        gram = x @ x.mT  # (..., m, m), m <= n
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x if wide else x.mT


class Muon(torch.optim.Optimizer):
    """Muon for 2-D weights. A param group's `blocks` (default 1) splits each of its matrices into
    that many row blocks, each orthogonalised on its own (fused q/k/v, fused modulation tables).
    Weight decay is decoupled, lr * weight_decay per step, as in AdamW."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.95, nesterov: bool = True,
                 weight_decay: float = 0.0, ns_steps: int = 5) -> None:  # fmt: skip
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, ns_steps=ns_steps,
                        blocks=1)  # fmt: skip
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2 or p.shape[0] % group["blocks"]:
                    raise ValueError(f"Muon takes 2-D weights whose rows split into {group['blocks']} blocks, "
                                     f"got shape {tuple(p.shape)}")  # fmt: skip

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Gather every matrix (block) by shape and settings, so one batched iteration serves each.
        batches: dict[tuple, list[tuple[torch.Tensor, torch.Tensor, dict]]] = defaultdict(list)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - group["momentum"])  # EMA of gradients
                update = p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf
                k = group["blocks"]
                blocks = update.reshape(k, p.shape[0] // k, p.shape[1])  # (blocks, rows / blocks, cols)
                key = (tuple(blocks.shape[1:]), group["ns_steps"], p.dtype, p.device)
                batches[key].append((p, blocks, group))
        for (shape, ns_steps, _, _), items in batches.items():
            ortho = orthogonalize(torch.cat([blocks for _, blocks, _ in items]), ns_steps)
            scale = 0.2 * math.sqrt(max(shape))  # AdamW's update RMS (Liu et al. 2025)
            start = 0
            for p, blocks, group in items:
                o = ortho[start : start + blocks.shape[0]].reshape(p.shape)
                start += blocks.shape[0]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(o.to(p.dtype), alpha=-group["lr"] * scale)
        return loss


class Optimizers:
    """Several optimisers stepped as one (Muon for hidden matrices + AdamW for the rest): one
    `param_groups` list (to set the learning rate), one `state_dict`."""

    def __init__(self, *optimizers: torch.optim.Optimizer) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def state_dict(self) -> dict:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        states = state.get("optimizers")
        if states is None or len(states) != len(self.optimizers):
            raise ValueError("the checkpoint's optimiser state is for another optimiser (see --optimizer)")
        for opt, s in zip(self.optimizers, states):
            opt.load_state_dict(s)


def muon_split(named_params, exclude: tuple[str, ...] = ()) -> tuple[list, list, list]:
    """(hidden matrices, fused matrices as (param, blocks), the rest) of `named_params`: Muon takes
    the 2-D weights of linear layers; embeddings, input and output layers (`exclude`), norms,
    biases and tables stay with AdamW (Jordan et al.: Muon is for hidden layers)."""
    hidden, fused, rest = [], [], []
    for name, p in named_params:
        if not p.requires_grad:
            continue
        if p.ndim != 2 or not name.endswith("weight") or any(part in name for part in exclude):
            rest.append(p)
        elif name.endswith("in_proj_weight"):  # nn.MultiheadAttention's fused q, k, v
            fused.append((p, 3))
        elif name.endswith("time_proj.weight"):  # Wan's 6 modulation vectors (shift/scale/gate x 2)
            fused.append((p, p.shape[0] // p.shape[1]))
        else:
            hidden.append(p)
    return hidden, fused, rest


# Layers that stay with AdamW under Muon: the input (patch embedding) and output (proj_out) layers,
# word embeddings, and the caption layout (its only matrix is the 5 x 64 gate, a row per moving frame).
ADAMW_ONLY = ("patch_embedding", "proj_out", "embed.weight", "layout.")


def build_optimizer(cfg: TrainConfig, transformer: torch.nn.Module,
                    encoder: torch.nn.Module) -> torch.optim.Optimizer | Optimizers:  # fmt: skip
    """AdamW, or Muon for the hidden matrices + AdamW for the rest (`cfg.optimizer`)."""
    adamw = functools.partial(torch.optim.AdamW, lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return adamw([p for m in (transformer, encoder) for p in m.parameters() if p.requires_grad])
    if cfg.optimizer != "muon":
        raise ValueError(f"optimizer must be 'adamw' or 'muon', got {cfg.optimizer!r}")
    named = [(f"transformer.{n}", p) for n, p in transformer.named_parameters()]
    named += [(f"text.{n}", p) for n, p in encoder.named_parameters()]
    hidden, fused, rest = muon_split(named, exclude=ADAMW_ONLY)
    groups = [{"params": hidden}] + [{"params": [p], "blocks": k} for p, k in fused]
    muon = Muon(groups, lr=cfg.lr, momentum=cfg.muon_momentum, weight_decay=cfg.weight_decay)
    return Optimizers(muon, adamw(rest))
