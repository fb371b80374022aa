"""Muon (videogen.training.optim): orthogonalised momentum for hidden matrices, AdamW for the rest."""

import pytest
import torch

from videogen.models.builtin import build_fresh
from videogen.training.config import TrainConfig
from videogen.training.optim import ADAMW_ONLY, Muon, Optimizers, build_optimizer, muon_split, orthogonalize


@pytest.mark.parametrize("shape", [(128, 128), (512, 128), (128, 512), (3, 64, 64)])
def test_orthogonalize_takes_every_singular_value_near_one_along_the_svd_directions(shape):
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    g[..., 0, :] *= 50  # a dominant direction, as in raw gradients
    o = orthogonalize(g)
    assert o.shape == g.shape
    s_in, s_out = torch.linalg.svdvals(g), torch.linalg.svdvals(o)
    # 5 quintic steps take the singular values of the Frobenius-normalised input into ~[0.7, 1.2], not
    # exactly 1 (Jordan et al.), all but the smallest: those under ~0.2% of the norm grow, but not to 1
    # (a random square matrix has some; they carry next to nothing of the gradient)
    lifted = s_in / g.norm(dim=(-2, -1)).unsqueeze(-1) >= 0.002
    assert lifted.float().mean() > 0.9
    assert s_out[lifted].min() > 0.6 and s_out.max() < 1.25, (s_out[lifted].min(), s_out.max())
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    polar = u @ vh  # the exact orthogonal factor
    cos = (o * polar).sum((-2, -1)) / (o.norm(dim=(-2, -1)) * polar.norm(dim=(-2, -1)))
    assert (cos > 0.95).all(), cos


def test_muon_updates_at_adamws_rms_and_orthogonalises_fused_blocks_separately():
    torch.manual_seed(0)
    grad = torch.randn(192, 64)
    grad[:64] *= 100  # one block (q) dominates: orthogonalised as one matrix, it would drown the others
    lr = 1e-3
    fused = torch.nn.Parameter(torch.zeros(192, 64))
    whole = torch.nn.Parameter(torch.zeros(192, 64))
    fused.grad, whole.grad = grad.clone(), grad.clone()
    Muon([{"params": [fused], "blocks": 3}], lr=lr, momentum=0.0, nesterov=False).step()
    Muon([whole], lr=lr, momentum=0.0, nesterov=False).step()
    for k, block in enumerate((-fused.detach()).split(64)):
        # each 64 x 64 block moves as an orthogonal matrix of its own, at ~0.2 * lr RMS (AdamW's; Liu et al. 2025)
        torch.testing.assert_close(block, orthogonalize(grad[64 * k : 64 * (k + 1)]) * 0.2 * 64**0.5 * lr,
                                   rtol=1e-4, atol=1e-8)  # fmt: skip
        assert 0.12 < block.pow(2).mean().sqrt() / lr < 0.28
    # as one matrix, the dominant block takes nearly all of the update
    k_and_v = (-whole.detach())[64:].pow(2).mean().sqrt() / lr
    assert k_and_v < 0.5 * (-fused.detach())[64:].pow(2).mean().sqrt() / lr


def test_matrices_of_one_shape_are_orthogonalised_as_one_batch_with_the_same_result():
    torch.manual_seed(1)
    ps = [torch.nn.Parameter(torch.zeros(32, 16)) for _ in range(3)]
    grads = [torch.randn(32, 16) for _ in ps]
    for p, g in zip(ps, grads):
        p.grad = g
    Muon(ps, lr=0.1, momentum=0.0, nesterov=False).step()
    for p, g in zip(ps, grads):
        torch.testing.assert_close(p.detach(), -0.1 * 0.2 * 32**0.5 * orthogonalize(g), rtol=1e-4, atol=1e-6)


def test_muon_fits_a_linear_map():
    torch.manual_seed(2)
    target = torch.randn(16, 16)
    x = torch.randn(256, 16)
    w = torch.nn.Parameter(torch.zeros(16, 16))
    opt = Muon([w], lr=0.05)
    losses = []
    for _ in range(200):
        loss = ((x @ w.T - x @ target.T) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.02 * losses[0], (losses[0], losses[-1])


def test_muon_rejects_tensors_it_cannot_orthogonalise():
    with pytest.raises(ValueError, match=r"2-D weights.*\(8,\)"):
        Muon([torch.nn.Parameter(torch.zeros(8))])
    with pytest.raises(ValueError, match=r"3 blocks.*\(8, 4\)"):
        Muon([{"params": [torch.nn.Parameter(torch.zeros(8, 4))], "blocks": 3}])


def test_the_built_in_models_hidden_matrices_go_to_muon_and_the_rest_to_adamw():
    transformer, encoder = build_fresh(0)
    named = [(f"transformer.{n}", p) for n, p in transformer.named_parameters()]
    named += [(f"text.{n}", p) for n, p in encoder.named_parameters()]
    names = {id(p): n for n, p in named}
    hidden, fused, rest = muon_split(named, exclude=ADAMW_ONLY)
    hidden_names = {names[id(p)] for p in hidden}
    assert "transformer.blocks.0.attn1.to_q.weight" in hidden_names
    assert "transformer.blocks.3.ffn.net.2.weight" in hidden_names
    assert "text.context.0.linear1.weight" in hidden_names
    assert {(names[id(p)], k) for p, k in fused} == {
        ("transformer.condition_embedder.time_proj.weight", 6),
        ("text.context.0.self_attn.in_proj_weight", 3),
        ("text.context.1.self_attn.in_proj_weight", 3),
    }
    rest_names = {names[id(p)] for p in rest}
    adamw = [
        "transformer.patch_embedding.weight",
        "transformer.proj_out.weight",
        "text.embed.weight",
        "text.layout.gate.weight",
        "transformer.blocks.0.attn1.to_q.bias",
        "transformer.scale_shift_table",
    ]
    assert set(adamw) <= rest_names
    assert len(hidden) + len(fused) + len(rest) == len(named)


def test_a_muon_optimisers_state_round_trips():
    torch.manual_seed(3)
    transformer, encoder = build_fresh(0)
    opt = build_optimizer(TrainConfig(optimizer="muon"), transformer, encoder)
    assert isinstance(opt, Optimizers)
    for p in list(transformer.parameters()) + list(encoder.parameters()):
        p.grad = torch.randn_like(p)
    opt.step()
    state = opt.state_dict()
    again = build_optimizer(TrainConfig(optimizer="muon"), *build_fresh(0))
    again.load_state_dict(state)
    for a, b in zip(opt.optimizers, again.optimizers):
        sa, sb = a.state_dict()["state"], b.state_dict()["state"]
        assert sa.keys() == sb.keys() and len(sa) > 0
        for k in sa:
            for field, v in sa[k].items():
                assert torch.equal(torch.as_tensor(v), torch.as_tensor(sb[k][field]))
    with pytest.raises(ValueError, match="another optimiser"):
        again.load_state_dict(torch.optim.AdamW(transformer.parameters()).state_dict())
