"""Prompt encoders: text -> (B, L, D) embeddings for the transformer's cross-attention.

* `T5PromptEncoder`: UMT5 + its tokenizer from a diffusers folder, as Wan's pipelines use it:
  tokens past the prompt's length are zeroed (not just masked), length `max_length` (512 in Wan).
* `VocabPromptEncoder`: the built-in model's encoder over its own small vocabulary: a learned
  embedding per word plus a learned position embedding; unknown words are ignored with a warning.
"""

from __future__ import annotations

import html
import importlib.util
import re
import warnings

import regex
import torch
from torch import nn

_FTFY = importlib.util.find_spec("ftfy") is not None  # decided once, as diffusers' `is_ftfy_available`


def clean_prompt(text: str) -> str:
    """A prompt as diffusers' Wan pipelines clean it before tokenizing (`prompt_clean`), so the same
    prompt gives the same embeddings: mojibake and stray escapes repaired by ftfy where it is
    installed (diffusers checks the same), HTML entities decoded twice ("&amp;amp;" -> "&"),
    every run of whitespace made one space, the ends trimmed. Whitespace is what the `regex`
    package (diffusers' dependency) calls `\\s`, the Unicode White_Space property."""
    if _FTFY:
        import ftfy

        text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return regex.sub(r"\s+", " ", text).strip()


class T5PromptEncoder:
    def __init__(self, tokenizer, text_encoder, max_length: int = 512) -> None:
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.max_length = max_length

    @torch.no_grad()
    def encode(self, prompts: list[str]) -> torch.Tensor:
        batch = self.tokenizer(
            [clean_prompt(p) for p in prompts],
            padding="max_length",
            max_length=self.max_length,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        device = next(self.text_encoder.parameters()).device
        ids, mask = batch.input_ids.to(device), batch.attention_mask.to(device)
        hidden = self.text_encoder(ids, mask).last_hidden_state.float()  # (B, L, D)
        # Under offload (`videogen.models.memory`) the encoder's hook runs it on the GPU while its
        # weights, and so `ids` and `mask` here, start on the CPU: the mask goes where `hidden` is.
        return hidden * mask.to(hidden.device).unsqueeze(-1).to(hidden.dtype)  # zero past each prompt, as Wan does


class VocabPromptEncoder(nn.Module):
    """Word-level encoder for the built-in model's caption grammar."""

    def __init__(self, vocab: list[str], dim: int, max_length: int = 16, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.vocab = list(vocab)
        self.index = {w: i + 1 for i, w in enumerate(self.vocab)}  # 0 = padding
        self.max_length = max_length
        self.embed = nn.Embedding(len(self.vocab) + 1, dim, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(max_length, dim))
        # A few self-attention layers make each word's embedding depend on its context, so that
        # "white" in "a white circle" and in "on a white background" reach the video model as
        # different things: position-tagged words alone leave colours unbound to their roles.
        self.context = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)

    def tokenize(self, prompt: str) -> list[int]:
        words = re.findall(r"[a-z]+", prompt.lower())
        unknown = [w for w in words if w not in self.index]
        if unknown:
            warnings.warn(f"prompt words not in the built-in model's vocabulary are ignored: {unknown}", stacklevel=3)
        return [self.index[w] for w in words if w in self.index][: self.max_length]

    def ids(self, prompts: list[str]) -> torch.Tensor:
        ids = torch.zeros(len(prompts), self.max_length, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            toks = self.tokenize(prompt)
            ids[row, : len(toks)] = torch.tensor(toks, dtype=torch.long)
        return ids.to(self.pos.device)

    @torch.no_grad()
    def encode(self, prompts: list[str]) -> torch.Tensor:
        return self.forward(self.ids(prompts))

    def encode_train(self, prompts: list[str]) -> torch.Tensor:
        """Like `encode`, with gradients (training)."""
        return self.forward(self.ids(prompts))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        valid = ids > 0
        pad = ~valid
        pad[:, 0] = False  # an empty prompt still needs one key to attend to (its output is zeroed below)
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for layer in self.context:
            x = layer(x, src_key_padding_mask=pad)
        return self.norm(x) * valid.unsqueeze(-1)  # (B, L, D), zero past the prompt like the T5 path
