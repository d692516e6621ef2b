"""A Qwen2-architecture decoder in plain PyTorch (as in transformers' modeling_qwen2.py).

RMSNorm, rotate-half RoPE, grouped-query attention with q/k/v biases, SwiGLU MLP, tied
embeddings. Written out here rather than imported from transformers so that the recipe needs
only Debian's python3-torch, and so that every operation the C++ reference transformer
(examples/transformer) implements is visible in one page.
"""

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TinyConfig:
    vocab_size: int = 257  # 256 bytes + <|endoftext|>
    hidden_size: int = 384
    intermediate_size: int = 1024
    num_hidden_layers: int = 4
    num_attention_heads: int = 6
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def hf_config(self, eos_token_id: int, description: str = "", *, rope: str) -> dict:
        """config.json in the Hugging Face Qwen2 format that amc's parse_config reads;
        `description` goes into "amc_description", which amc-generate --demo prints, and `rope`,
        the rotary-angle convention the model was trained with (rope_tables), into
        "amc_rope_angles", which amc's reference transformer follows by default."""
        if rope not in ("exact", "transformers"):
            raise ValueError(f"hf_config: rope is {rope!r}, not 'exact' or 'transformers'")
        config = asdict(self)
        if description:
            config["amc_description"] = description
        config["amc_rope_angles"] = rope
        config.update(
            architectures=["Qwen2ForCausalLM"],
            model_type="qwen2",
            hidden_act="silu",
            tie_word_embeddings=True,
            torch_dtype="bfloat16",
            bos_token_id=eos_token_id,
            eos_token_id=eos_token_id,
            use_sliding_window=False,
            attention_dropout=0.0,
        )
        return config


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rope_tables(config: TinyConfig, positions: int, dtype=torch.float32, rope="exact"):
    """cos, sin: [positions, head_dim], the rotate-half layout (frequencies repeated twice).

    rope "exact": angles in float64 (how data/qwen2-tiny was trained); "transformers": the
    inverse frequencies and position x frequency products in float32, as transformers'
    Qwen2RotaryEmbedding computes them (how Qwen2 models and data/qwen2-retrieval were
    trained); the two differ by up to about 1e-3 rad at 16K positions."""
    half = config.head_dim // 2
    if rope == "exact":
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, half, dtype=torch.float64) / half))
        angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    elif rope == "transformers":
        exponents = torch.arange(0, config.head_dim, 2, dtype=torch.int64).float()
        inv_freq = 1.0 / (config.rope_theta ** (exponents / config.head_dim))
        angles = torch.outer(torch.arange(positions, dtype=torch.int64).float(), inv_freq)
    else:
        raise ValueError(f"rope_tables: rope is {rope!r}, not 'exact' or 'transformers'")
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.config = config
        d, hd = config.hidden_size, config.head_dim
        self.q_proj = nn.Linear(d, config.num_attention_heads * hd, bias=True)
        self.k_proj = nn.Linear(d, config.num_key_value_heads * hd, bias=True)
        self.v_proj = nn.Linear(d, config.num_key_value_heads * hd, bias=True)
        self.o_proj = nn.Linear(config.num_attention_heads * hd, d, bias=False)
        # Optional: a function (q, k, v, scale) -> causal attention output that replaces the
        # plain formulation below (training uses a chunked one; see Qwen2Tiny.use_attention).
        self.kernel = None

    def forward(self, x, cos, sin, mask, kv_bf16=False):
        # x: [batch, seq, hidden]; q: [batch, heads, seq, head_dim]
        c = self.config
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if kv_bf16:  # as a bf16 KV cache stores them (keys after RoPE)
            k, v = k.to(torch.bfloat16).to(x.dtype), v.to(torch.bfloat16).to(x.dtype)
        group = c.num_attention_heads // c.num_key_value_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        if self.kernel is not None:
            out = self.kernel(q, k, v, 1.0 / math.sqrt(c.head_dim))
            return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim) + mask
        out = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        d, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, mask, kv_bf16=False):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, kv_bf16)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Tiny(nn.Module):
    def __init__(self, config: TinyConfig, rope: str = "exact"):
        super().__init__()
        self.config = config
        self.rope = rope  # the rotary-angle convention (rope_tables)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        # transformers' Qwen2 initialisation: N(0, 0.02) weights, zero biases.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, ids, kv_bf16=False):
        """ids: [batch, seq] -> logits [batch, seq, vocab] (tied unembedding). kv_bf16 rounds
        keys and values to bf16 as a bf16 KV cache would (reference logits only)."""
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        cos, sin = rope_tables(self.config, t, x.dtype, self.rope)
        mask = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, kv_bf16)
        # The unembedding in float32 even under bf16 autocast (training): it is cheap, and
        # bf16 logits would blur the loss by up to 2^-9 of their size.
        with torch.autocast("cpu", enabled=False):
            return self.norm(x.float()) @ self.embed_tokens.weight.T

    def use_attention(self, kernel):
        """Replaces every layer's causal attention by kernel(q, k, v, scale) (None: plain)."""
        for layer in self.layers:
            layer.self_attn.kernel = kernel

    def hf_state_dict(self):
        """Parameters under the names of a Hugging Face Qwen2 checkpoint (tied: no lm_head)."""
        return {"model." + name: p.detach() for name, p in self.named_parameters()}
