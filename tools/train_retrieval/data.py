"""Training sequences that reward in-context retrieval: held-out-style code windows from the
Python standard library with key-value records planted at random depths and queried later,
random strings copied later in the same sequence, and (for the curriculum's first phase)
sequences made of nothing but random strings and their repeats.

Every sequence comes with a loss weight per target byte: 0 where the byte cannot be predicted
by anyone (the random content of a record or string the first time it appears, the name of
the key a query asks for), 1 elsewhere. Each draw is a pure function of its generator, so the
same seed and step give the same batch on every run (and after a resume).

Formats (bytes; the tokenizer is one token per byte):
- record:  `NAME = "VALUE"\n` at the start of a line, NAME a random identifier (KEY_4821,
           an upper-case or snake-case name), VALUE 3-8 random digits or letters; the query is
           the same line again, later, also at the start of a line. The passkey probe
           (amc-eval passkey) plants and asks for `PASSKEY = "48213"` this way; the name
           PASSKEY itself never occurs in training.
- copy:    a random string of 16-160 bytes (letters, or printable ASCII) inserted anywhere in
           the code and inserted again later.
"""

import torch

LETTERS = b"abcdefghijklmnopqrstuvwxyz"
UPPER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
DIGITS = b"0123456789"
ALNUM = LETTERS + UPPER + DIGITS
# Printable ASCII without the quote and backslash, so that a copied string never ends a record.
PRINTABLE = bytes(c for c in range(32, 127) if c not in b'"\\')
SYLLABLES = [b"get", b"set", b"max", b"min", b"path", b"name", b"size", b"data", b"file",
             b"line", b"node", b"item", b"key", b"value", b"count", b"index", b"buffer",
             b"token", b"user", b"time", b"mode", b"flag", b"list", b"table", b"port",
             b"host", b"text", b"code", b"level", b"limit", b"offset", b"state"]
RESERVED_NAMES = {b"PASSKEY"}  # the probe's name stays unseen
ALL_BYTES = bytes(range(256))
PURE_COPY_ALPHABETS = [ALL_BYTES, PRINTABLE, LETTERS]


def randint(generator, low, high):
    """A uniform integer in [low, high)."""
    return int(torch.randint(low, high, (1,), generator=generator))


def random_bytes(generator, alphabet, length):
    picks = torch.randint(0, len(alphabet), (length,), generator=generator).tolist()
    return bytes(alphabet[i] for i in picks)


def random_name(generator):
    kind = randint(generator, 0, 3)
    if kind == 0:
        name = b"KEY_" + random_bytes(generator, DIGITS, 4)
    elif kind == 1:
        name = random_bytes(generator, UPPER, randint(generator, 3, 9))
        if randint(generator, 0, 2):
            name += b"_" + random_bytes(generator, UPPER + DIGITS, randint(generator, 2, 6))
    else:
        parts = [SYLLABLES[randint(generator, 0, len(SYLLABLES))]
                 for _ in range(randint(generator, 1, 4))]
        name = b"_".join(parts) + random_bytes(generator, DIGITS, randint(generator, 0, 3))
    return name if name not in RESERVED_NAMES else b"KEY_" + name


def random_value(generator):
    if randint(generator, 0, 2):  # half of them digits, as the passkey
        return random_bytes(generator, DIGITS, randint(generator, 3, 9))
    return random_bytes(generator, ALNUM, randint(generator, 3, 9))


class Insert:
    """Bytes to insert at a code offset, with a weight per byte (0: unpredictable)."""

    def __init__(self, offset, data, weights):
        self.offset, self.data, self.weights = offset, data, weights


def line_start_at_or_after(code, offset):
    """The first offset >= offset that starts a line (or len(code))."""
    found = code.find(b"\n", max(0, offset - 1))
    return len(code) if found < 0 else found + 1


def plan_records(generator, code, count):
    inserts = []
    for _ in range(count):
        name, value = random_name(generator), random_value(generator)
        line = name + b' = "' + value + b'"\n'
        first = line_start_at_or_after(code, randint(generator, 0, max(1, len(code) // 2)))
        second = line_start_at_or_after(code, randint(generator, first + 1, len(code) + 1))
        if second >= len(code) or first >= second:
            continue
        inserts.append(Insert(first, line, [0.0] * len(line)))
        # The query: which name is asked for is unpredictable; the value after it is not.
        head = len(name) + 4  # NAME = "
        inserts.append(Insert(second, line, [0.0] * head + [1.0] * (len(line) - head)))
    return inserts


def plan_copies(generator, code, count):
    inserts = []
    for _ in range(count):
        alphabet = LETTERS if randint(generator, 0, 2) else PRINTABLE
        longest = max(17, min(160, len(code) // 4))
        text = random_bytes(generator, alphabet, randint(generator, 16, longest + 1))
        first = randint(generator, 0, max(1, len(code) // 2))
        second = randint(generator, first + 1, len(code) + 1)
        inserts.append(Insert(first, text, [0.0] * len(text)))
        # Its first byte cannot be known to start a copy; the rest can be copied.
        inserts.append(Insert(second, text, [0.0] + [1.0] * (len(text) - 1)))
    return inserts


def assemble(code_ids, inserts, length):
    """Code ids with the inserts placed at their offsets (stable order), cut to `length`:
    (ids, weights), code bytes weighted 1."""
    inserts = sorted(inserts, key=lambda i: i.offset)
    ids, weights, at = [], [], 0
    for insert in inserts:
        ids += code_ids[at:insert.offset]
        weights += [1.0] * (insert.offset - at)
        ids += list(insert.data)
        weights += insert.weights
        at = insert.offset
    ids += code_ids[at:]
    weights += [1.0] * (len(code_ids) - at)
    return ids[:length], weights[:length]


def code_window(stream, length, generator):
    start = randint(generator, 0, stream.numel() - length - 1)
    return stream[start:start + length]


def augmented_code(stream, length, generator, records, copies):
    """A code window of `length` + 1 tokens with records and copies inserted."""
    ids = code_window(stream, length + 1, generator).tolist()
    # <|endoftext|> (256) is not a byte: search lines in a byte copy, assemble the ids.
    code = bytes(i if i < 256 else 0 for i in ids)
    inserts = plan_records(generator, code, records) + plan_copies(generator, code, copies)
    # Shrink the code so that the result is still length + 1 tokens; inserts past the new end
    # are dropped, and so is the other half of their pair (a query without its record, or the
    # reverse, would teach nothing).
    keep = length + 1 - sum(len(i.data) for i in inserts)
    pairs = {}
    for i in inserts:
        if i.offset < keep:
            pairs.setdefault(i.data, []).append(i)
    inserts = [i for group in pairs.values() if len(group) == 2 for i in group]
    keep = length + 1 - sum(len(i.data) for i in inserts)
    out, weights = assemble(ids[:keep], inserts, length + 1)
    return torch.tensor(out), torch.tensor(weights)


def pure_copies(length, generator):
    """A sequence of nothing but random strings, each appearing 2-3 times: the first phase of
    the curriculum, where copying is the only thing to learn beyond letter frequencies."""
    pieces, weights, seen = [], [], []
    total = 0
    while total < length + 1:
        if seen and randint(generator, 0, 2):
            text = seen[randint(generator, 0, len(seen))]
            w = [0.0] + [1.0] * (len(text) - 1)
        else:
            # Every byte value as well as letters and printable text: with 256 symbols one
            # byte nearly identifies a position, so matching one byte is enough to copy, which
            # is where induction heads form first (EXPERIMENTS.md); letters need longer matches.
            alphabet = PURE_COPY_ALPHABETS[randint(generator, 0, len(PURE_COPY_ALPHABETS))]
            text = random_bytes(generator, alphabet, randint(generator, 8, 65))
            seen.append(text)
            w = [0.0] * len(text)
        sep = b" " if randint(generator, 0, 2) else b"\n"
        pieces.append(text + sep)
        weights += w + [0.0]
        total += len(text) + 1
    data = b"".join(pieces)[:length + 1]
    return torch.tensor(list(data)), torch.tensor(weights[:length + 1])


def repeated_string(length, generator, alphabet=None):
    """A random string over one of PURE_COPY_ALPHABETS, 16 to half the sequence long, placed
    twice at random positions in random filler of the same alphabet: the curriculum's first
    phase, where the model learns to copy. Its length and both positions vary from row to row,
    so that only matching by content predicts the repeat (with a fixed distance the model
    learns a positional head instead: EXPERIMENTS.md). The repeat's bytes after its first are
    weighted; nothing else is."""
    n = length + 1
    if alphabet is None:
        alphabet = PURE_COPY_ALPHABETS[randint(generator, 0, len(PURE_COPY_ALPHABETS))]
    size = randint(generator, 16, n // 2 + 1)
    first = randint(generator, 0, n - 2 * size + 1)
    second = randint(generator, first + size, n - size + 1)
    text = random_bytes(generator, alphabet, size)
    sequence = bytearray(random_bytes(generator, alphabet, n))
    sequence[first:first + size] = text
    sequence[second:second + size] = text
    weights = torch.zeros(n)
    weights[second + 1:second + size] = 1.0
    return torch.tensor(list(sequence)), weights


def batch(stream, length, count, generator, mix):
    """[count, length + 1] token ids and [count, length] loss weights (of the targets).

    mix: probabilities of (repeated strings, pure copies, code with inserts, plain code); the
    number of records and copies in a code window grows with its length (one of each per 512
    bytes on average)."""
    rows, masks = [], []
    for _ in range(count):
        u = float(torch.rand((), generator=generator))
        if u < mix[0]:
            ids, w = repeated_string(length, generator)
        elif u < mix[0] + mix[1]:
            ids, w = pure_copies(length, generator)
        elif u < mix[0] + mix[1] + mix[2]:
            per = max(1, length // 512)
            ids, w = augmented_code(stream, length, generator,
                                    records=randint(generator, 1, 2 * per + 1),
                                    copies=randint(generator, 0, per + 1))
        else:
            ids = code_window(stream, length + 1, generator)
            w = torch.ones(length + 1)
        rows.append(ids)
        masks.append(w[1:])
    return torch.stack(rows), torch.stack(masks).float()
