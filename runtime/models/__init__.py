"""The model zoo (GPT and Llama families) with the module names the TP plan and checkpoints use."""

from runtime.models.transformer import (
    Block,
    Embedding,
    FeedForward,
    LMHead,
    SelfAttention,
    Transformer,
    build_layer,
    build_model,
    init_weights,
)

__all__ = [
    "Block",
    "Embedding",
    "FeedForward",
    "LMHead",
    "SelfAttention",
    "Transformer",
    "build_layer",
    "build_model",
    "init_weights",
]
