"""The attention logits of every layer and head of model.py's Qwen2 on one sequence, for the
tools that look inside a model (analyze.py here, the training probes of tools/train_retrieval).
Imports only model.py, so that either tool can use it whatever its own module names."""

import math

import torch

from model import rope_tables, rotate_half


@torch.no_grad()
def attention_logits(model, ids):
    """[layers] of [heads, seq, seq]: q.k / sqrt(head_dim) of one sequence `ids` [seq], -inf
    above the diagonal (the causal mask), from a forward pass that keeps them."""
    c = model.config
    t = ids.numel()
    x = model.embed_tokens(ids.unsqueeze(0))
    cos, sin = rope_tables(c, t, x.dtype, model.rope)
    mask = torch.full((t, t), float("-inf")).triu(1)
    logits = []
    for layer in model.layers:
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(1, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(1, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(c.num_attention_heads // c.num_key_value_heads, dim=1)
        logits.append((q @ k.transpose(-1, -2) / math.sqrt(c.head_dim) + mask)[0])
        x = layer(x, cos, sin, mask)
    return logits
