"""Sampling: the one denoising loop (`loop`) and the transformer calls it makes (`forward`)."""
