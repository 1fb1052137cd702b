"""A small byte-level BPE tokenizer in Qwen's shape, plus its HF config files.

Pipeline as in Qwen2/Qwen3's ``tokenizer.json``: NFC normaliser, a regex split
(Qwen's pattern), byte-level mapping without prefix space, BPE without
``unk``, byte-level decoder. Special tokens are Qwen's ``<|endoftext|>``,
``<|im_start|>`` and ``<|im_end|>`` (ids 0, 1, 2 here, not 151643.. as in
Qwen, because the vocabulary is tiny). The chat template is ChatML without
thinking blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Qwen2/Qwen3 pre-tokenizer pattern (single digits, letters with one leading
# non-letter, punctuation runs, newline runs, whitespace).
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def render_chatml(messages: Iterable[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """The text :data:`CHATML_TEMPLATE` renders, without jinja (for training data)."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train the byte-level BPE on ``texts``; ``vocab_size`` counts the special tokens.

    Deterministic for a given corpus order and ``tokenizers`` version (merge
    ties are broken by pair, not by hash order). Raises ``ValueError`` when
    the corpus is too small to reach ``vocab_size``.
    """
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise ValueError(
            f"BPE reached {tok.get_vocab_size()} tokens, wanted {vocab_size}: corpus too small"
        )
    return tok


def tokenizer_config(model_max_length: int) -> dict:
    """``tokenizer_config.json`` content (transformers; Qwen's fields, fast tokenizer class)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, t in enumerate(SPECIAL_TOKENS)
        },
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "model_max_length": model_max_length,
        "chat_template": CHATML_TEMPLATE,
    }


def save_tokenizer(tok: Tokenizer, folder: Path, model_max_length: int) -> list[Path]:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    tok_path = folder / "tokenizer.json"
    tok.save(str(tok_path), pretty=True)
    cfg_path = folder / "tokenizer_config.json"
    cfg_path.write_text(
        json.dumps(tokenizer_config(model_max_length), indent=2) + "\n", encoding="utf-8"
    )
    return [tok_path, cfg_path]
