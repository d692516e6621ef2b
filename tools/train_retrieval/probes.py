"""What the retrieval checkpoint is trained for, measured on held-out code during training.

- valid_loss: mean loss (nats per byte) on fixed 1024-byte windows of the held-out files;
- copy_loss: the induction test of the issue: a random 100-letter string that occurred once,
  repeated after at least 1000 bytes of held-out code (fewer while the context is shorter);
  mean loss on bytes 2..100 of the second occurrence (the first cannot be known to start one);
- passkey: `PASSKEY = "ddddd"` planted at a random line of held-out code, asked for at the end
  (`PASSKEY = "`): the share of trials in which the 5 digits are each the model's most likely
  next byte, which is exactly when greedy decoding reproduces them;
- max_logit_L: the largest attention logit q.k / sqrt(d) of layer L over one held-out window:
  the first run diverged after layer 0's grew to about 4000 (attention logit growth, which bf16
  rounding of q and k turns into noise of a few percent of the logit), so the curve shows it.
"""


import torch
import torch.nn.functional as F

import data
from attention_maps import attention_logits

EOS_ID = 256


def max_attention_logits(model, ids):
    """[layers] the largest |q.k| / sqrt(head_dim) over the causal scores of `ids` [seq]."""
    return [logits[torch.isfinite(logits)].abs().max().item()
            for logits in attention_logits(model, ids)]


def clean_spans(valid, length, count, generator):
    """`count` windows of held-out code of `length` bytes inside one file (no separator)."""
    out = []
    while len(out) < count:
        start = int(torch.randint(0, valid.numel() - length, (1,), generator=generator))
        window = valid[start:start + length]
        if not (window == EOS_ID).any():
            out.append(window)
    return out


def passkey_sequence(code, digits, depth):
    """Held-out code with `PASSKEY = "digits"` at the line nearest `depth` (a fraction) and
    the question at the end; returns ids and the positions whose next byte is a digit."""
    code = bytes(code.tolist())
    record = b'PASSKEY = "' + digits + b'"\n'
    question = b'\nPASSKEY = "'
    body = code[:len(code) - len(record) - len(question) - len(digits)]
    at = data.line_start_at_or_after(body, int(depth * len(body)))
    text = body[:at] + record + body[at:] + question + digits
    ids = torch.tensor(list(text))
    answer_from = len(text) - len(digits) - 1  # predicting the first digit
    return ids, list(range(answer_from, len(text) - 1))


class ProbeSet:
    def __init__(self, valid, seed, trials=16):
        g = torch.Generator().manual_seed(seed)
        self.valid_windows = clean_spans(valid, 1025, 4, g)
        self.filler = clean_spans(valid, 4096, trials, g)
        self.copies = [data.random_bytes(g, data.LETTERS, 100) for _ in range(trials)]
        self.digits = [data.random_bytes(g, data.DIGITS, 5) for _ in range(trials)]
        self.depths = torch.rand(trials, generator=g).tolist()

    @torch.no_grad()
    def measure(self, model, max_context):
        """The probes at the training context, or at 1024 bytes while that is shorter (the
        first phase trains on 96: its copying is measured further than it was trained)."""
        max_context = max(max_context, 1024)
        model.eval()
        out = {}
        batch = torch.stack(self.valid_windows)
        logits = model(batch[:, :-1])
        out["valid_loss"] = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item()
        for layer, value in enumerate(max_attention_logits(model, batch[0, :-1])):
            out[f"max_logit_{layer}"] = value

        gap = min(1000, max_context - 210)
        rows = [torch.cat([filler[:max_context - 200 - gap], torch.tensor(list(text)),
                           filler[-gap:], torch.tensor(list(text))])
                for text, filler in zip(self.copies, self.filler)]
        ids = torch.stack(rows)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits[:, -99:].flatten(0, 1), ids[:, -99:].flatten())
        out["copy_loss"] = loss.item()
        out["copy_gap"] = float(gap)

        sequences = [passkey_sequence(filler[:max_context], digits, depth)
                     for digits, depth, filler in zip(self.digits, self.depths, self.filler)]
        ids = torch.stack([s[0] for s in sequences])
        predicted = model(ids[:, :-1]).argmax(dim=-1)
        answer = sequences[0][1]  # the same positions in every row
        targets = ids[:, [a + 1 for a in answer]]
        out["passkey"] = (predicted[:, answer] == targets).all(dim=1).float().mean().item()
        model.train()
        return out
