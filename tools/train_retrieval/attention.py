"""Causal softmax attention computed in chunks of queries, for training at 4096 positions on a
CPU with PyTorch 1.13 (which has no fused scaled_dot_product_attention).

The plain formulation materialises [batch, heads, seq, seq] scores and keeps the
probabilities of every layer for the backward pass: 1.2 GB per layer for 3 x 4096 tokens and
6 heads, mostly for the masked half. Here each chunk of queries scores only the keys it may
see, the forward pass keeps only the output and the log-sum-exp per query (as FlashAttention
does), and the backward pass recomputes each chunk's probabilities. The arithmetic is float32
whatever the autocast dtype: bf16 scores would move a score of 20 by up to 0.04.
"""

import torch


class ChunkedCausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, chunk):
        # q, k, v: [batch, heads, seq, head_dim] (k and v already repeated for GQA).
        q, k, v = q.float(), k.float(), v.float()
        seq = q.shape[2]
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], dtype=q.dtype)
        for start in range(0, seq, chunk):
            end = min(seq, start + chunk)
            scores = torch.matmul(q[:, :, start:end], k[:, :, :end].transpose(-1, -2)) * scale
            mask_diagonal(scores, start)
            chunk_lse = torch.logsumexp(scores, dim=-1)
            probabilities = torch.exp(scores - chunk_lse.unsqueeze(-1))
            out[:, :, start:end] = torch.matmul(probabilities, v[:, :, :end])
            lse[:, :, start:end] = chunk_lse
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.chunk = scale, chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        scale, chunk = ctx.scale, ctx.chunk
        grad_out = grad_out.float()
        seq = q.shape[2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        # D_i = sum_j P_ij dP_ij = dO_i . O_i (the softmax backward's row term).
        row_term = (grad_out * out).sum(dim=-1)
        for start in range(0, seq, chunk):
            end = min(seq, start + chunk)
            q_c, do_c = q[:, :, start:end], grad_out[:, :, start:end]
            scores = torch.matmul(q_c, k[:, :, :end].transpose(-1, -2)) * scale
            mask_diagonal(scores, start)
            probabilities = torch.exp(scores - lse[:, :, start:end].unsqueeze(-1))
            dv[:, :, :end] += torch.matmul(probabilities.transpose(-1, -2), do_c)
            dp = torch.matmul(do_c, v[:, :, :end].transpose(-1, -2))
            ds = probabilities * (dp - row_term[:, :, start:end].unsqueeze(-1)) * scale
            dq[:, :, start:end] = torch.matmul(ds, k[:, :, :end])
            dk[:, :, :end] += torch.matmul(ds.transpose(-1, -2), q_c)
        return dq, dk, dv, None, None


def mask_diagonal(scores, start):
    """Sets -inf where a query of the chunk starting at `start` would see a later key.
    scores: [batch, heads, chunk rows, start + chunk rows]."""
    rows = scores.shape[-2]
    future = torch.ones(rows, rows, dtype=torch.bool).triu(1)
    scores[..., start:start + rows].masked_fill_(future, float("-inf"))


def chunked_causal_attention(q, k, v, scale, chunk=256):
    """softmax(q k^T * scale + causal mask) v, [batch, heads, seq, head_dim], float32."""
    return ChunkedCausalAttention.apply(q, k, v, scale, chunk)
