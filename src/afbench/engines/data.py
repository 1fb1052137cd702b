"""Chat data: parquet rows -> conversations -> token ids with an assistant-only loss mask.

Row schema (docs/reference.md §6, willcb/V3-wordle): either ``messages`` (a list of ``{role, content}``)
or ``prompt`` (system + first user message) plus ``completion`` (alternating assistant / user
turns). ``content`` given as a list is joined with newlines. pandas returns list columns as
numpy arrays; they are converted to lists here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import torch

from afbench.config.models import CHAT_COLUMNS
from afbench.errors import ConfigError

Message = dict[str, str]
IGNORE_INDEX = -100  # label value that cross-entropy ignores (non-assistant tokens)


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    parts = []
    for part in list(value):
        if isinstance(part, dict):
            parts.append(str(part.get("text", part.get("content", ""))))
        else:
            parts.append(str(part))
    return "\n".join(parts)


def _messages(value: Any) -> list[Message]:
    out = []
    for m in list(value) if value is not None else []:
        m = dict(m)
        out.append({"role": str(m["role"]), "content": _content(m.get("content"))})
    return out


def row_messages(row: Mapping[str, Any]) -> list[Message]:
    """One row's conversation (the schema above): ``messages``, else ``prompt`` + ``completion``.
    Also the sample processor of afbench's torchtitan config function (one HF datasets row)."""
    if row.get("messages") is not None:
        return _messages(row["messages"])
    return _messages(row.get("prompt")) + _messages(row.get("completion"))


def load_conversations(path: str | Path, max_samples: int | None = None) -> list[list[Message]]:
    """Read a chat parquet file into a list of conversations (lists of role/content dicts).

    Raises ConfigError naming ``data.path`` when the file is missing or lacks the columns.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"data.path: file not found: {path}; point data.path at a parquet file")
    df = pd.read_parquet(path)
    if set(CHAT_COLUMNS[0]) <= set(df.columns):
        convs = [_messages(v) for v in df["messages"]]
    elif set(CHAT_COLUMNS[1]) <= set(df.columns):
        convs = [row_messages(r) for r in df[["prompt", "completion"]].to_dict("records")]
    else:
        raise ConfigError(
            f"data.path: {path} has columns {list(df.columns)}; needs 'messages' or "
            "'prompt' + 'completion' (lists of {role, content})"
        )
    convs = [c for c in convs if c]
    if max_samples:
        convs = convs[:max_samples]
    if not convs:
        raise ConfigError(f"data.path: {path} holds no conversations")
    return convs


def assistant_markers(tokenizer: Any) -> tuple[str, str]:
    """(header, end) strings that open and close an assistant turn in the rendered template.

    Derived from the tokenizer's own chat template: the first line of the generation prompt
    (``<|im_start|>assistant\\n`` for ChatML) and the end-of-turn token (``<|im_end|>`` when
    the vocabulary has it, else eos).
    """
    probe = [{"role": "user", "content": "x"}]
    plain = tokenizer.apply_chat_template(probe, tokenize=False)
    with_gen = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    gen = with_gen[len(plain) :]
    header = gen.split("\n", 1)[0] + "\n" if "\n" in gen else gen
    vocab = tokenizer.get_vocab()
    end = "<|im_end|>" if "<|im_end|>" in vocab else tokenizer.eos_token
    if not header or not end:
        raise ConfigError("model.path: the tokenizer's chat template has no assistant header")
    return header, end


def tokenize_conversation(
    tokenizer: Any, messages: Sequence[Message], markers: tuple[str, str]
) -> tuple[list[int], list[bool]]:
    """Render with the chat template and tokenize; mask is True on assistant tokens
    (the turn's content and its end-of-turn token, not the role header)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False)
    header, end = markers
    spans = []
    pos = 0
    while (start := text.find(header, pos)) != -1:
        body = start + len(header)
        stop = text.find(end, body)
        stop = len(text) if stop == -1 else stop + len(end)
        spans.append((body, stop))
        pos = stop
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = []
    for a, b in enc["offset_mapping"]:
        mask.append(any(s <= a and b <= e for s, e in spans) and b > a)
    return list(enc["input_ids"]), mask


def pack(
    samples: Sequence[tuple[list[int], list[bool]]], seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate samples and cut into blocks of ``seq_len`` tokens.

    Returns (input_ids, labels), both int64 of shape [num_blocks, seq_len]; labels are the ids
    on assistant tokens and IGNORE_INDEX elsewhere (the model shifts them by one internally).
    The incomplete tail is dropped. Raises ConfigError when not even one block fits.
    """
    ids: list[int] = []
    labels: list[int] = []
    for tok, mask in samples:
        ids.extend(tok)
        labels.extend(t if m else IGNORE_INDEX for t, m in zip(tok, mask))
    n = len(ids) // seq_len
    if n == 0:
        raise ConfigError(f"scheduler.seq_len {seq_len} exceeds the {len(ids)} tokens of the data")
    ids_t = torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)
    lab_t = torch.tensor(labels[: n * seq_len], dtype=torch.long).view(n, seq_len)
    return ids_t, lab_t


def pad_each(
    samples: Sequence[tuple[list[int], list[bool]]], seq_len: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sample per row, truncated or right-padded to ``seq_len`` (labels IGNORE_INDEX on pad)."""
    rows, labs = [], []
    for tok, mask in samples:
        tok, mask = tok[:seq_len], mask[:seq_len]
        lab = [t if m else IGNORE_INDEX for t, m in zip(tok, mask)]
        pad = seq_len - len(tok)
        rows.append(tok + [pad_id] * pad)
        labs.append(lab + [IGNORE_INDEX] * pad)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(labs, dtype=torch.long)


class BatchOrder:
    """Deterministic order of blocks: a fresh permutation (seeded) each pass over the data."""

    def __init__(self, num_blocks: int, seed: int) -> None:
        self.num_blocks = num_blocks
        self.gen = torch.Generator().manual_seed(seed)
        self.queue: list[int] = []

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            if not self.queue:
                self.queue = torch.randperm(self.num_blocks, generator=self.gen).tolist()
            out.append(self.queue.pop(0))
        return out
