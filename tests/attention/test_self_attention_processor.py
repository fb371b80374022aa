"""The one self-attention processor (videogen.attention.processor) and its per-call context
(videogen.attention.call): dense equals diffusers' own processor, fused projections included;
a call's context is typed, scoped to its block and private to its thread."""

import threading

import pytest
import torch
from diffusers import WanTransformer3DModel
from tiny_wan import tiny_transformer_config

from videogen.attention.call import AttentionCall, attention_call, current_attention_call
from videogen.attention.causal import CausalCall
from videogen.attention.processor import (
    WanSelfAttnProcessor,
    dense_attention,
    has_self_attention,
    install_self_attention,
)


def _tiny_wan_and_input():
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(**tiny_transformer_config()).eval()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 16, 3, 8, 8, generator=g)
    embeds = torch.randn(1, 7, 32, generator=g)
    return transformer, dict(
        hidden_states=x, timestep=torch.tensor([500.0]), encoder_hidden_states=embeds, return_dict=False
    )


@pytest.mark.parametrize("fused", [False, True])
def test_the_dense_backend_equals_diffusers_wan_processor(fused):
    transformer, inputs = _tiny_wan_and_input()
    if fused:
        transformer.fuse_qkv_projections()
        assert transformer.blocks[0].attn1.fused_projections
    with torch.no_grad():
        theirs = transformer(**inputs)[0]
        install_self_attention(transformer, dense_attention)
        ours = transformer(**inputs)[0]
    assert has_self_attention(transformer)
    assert not isinstance(transformer.blocks[0].attn2.processor, WanSelfAttnProcessor)  # cross-attention stays theirs
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_an_attention_call_lasts_for_its_block_only():
    call = AttentionCall(grid=(2, 4, 4), step=1, num_steps=4)
    assert current_attention_call() is None
    with attention_call(call):
        assert current_attention_call() is call
        with attention_call(AttentionCall()):
            assert current_attention_call() == AttentionCall()
        assert current_attention_call() is call
    assert current_attention_call() is None
    with pytest.raises(RuntimeError), attention_call(call):
        raise RuntimeError("a failed transformer call")
    assert current_attention_call() is None


def test_another_thread_does_not_see_this_threads_call():
    seen = []
    with attention_call(AttentionCall(grid=(1, 2, 2))):
        worker = threading.Thread(target=lambda: seen.append(current_attention_call()))
        worker.start()
        worker.join()
    assert seen == [None]


def test_attention_calls_are_immutable_and_a_causal_call_is_checked():
    call = AttentionCall(grid=(1, 2, 2))
    with pytest.raises(AttributeError):
        call.step = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="tokens_per_frame"):
        CausalCall("full")
    with pytest.raises(ValueError, match="plan and a cache"):
        CausalCall("cache")
