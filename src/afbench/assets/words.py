"""The five-letter English word list shipped as ``assets/words/wordle_words.txt``.

Source: the ``english_words`` package (PyPI ``english-words``), lists ``web2``
(Webster's 2nd International) and ``gcide`` (GNU Collaborative International
Dictionary of English). Kept: words of exactly five ASCII letters written in
lower case in the source (so proper nouns such as "Aaron" are dropped),
deduplicated and sorted. One word per line, UTF-8, trailing newline.
"""

from __future__ import annotations

import logging
from pathlib import Path

from afbench.assets.wordle import WORD_LEN

log = logging.getLogger(__name__)

SOURCES = ("web2", "gcide")


def is_wordle_word(word: str) -> bool:
    """True for exactly five lower-case ASCII letters."""
    return len(word) == WORD_LEN and word.isascii() and word.isalpha() and word.islower()


def words_from_package() -> list[str]:
    """Sorted five-letter words from ``english_words``; raises ``ImportError`` if absent."""
    # english-words: the [assets] extra, only needed to rebuild
    from english_words import get_english_words_set

    return sorted({w for w in get_english_words_set(list(SOURCES)) if is_wordle_word(w)})


def read_word_list(path: Path) -> list[str]:
    """Words of a one-per-line file, validated and sorted.

    Raises ``ValueError`` naming the first line that is not a five-letter word.
    """
    words = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        word = line.strip()
        if not word:
            continue
        if not is_wordle_word(word):
            raise ValueError(f"{path}:{n}: not a five-letter lower-case word: {word!r}")
        words.append(word)
    return sorted(set(words))


def write_word_list(words: list[str], path: Path) -> Path:
    """Write ``words`` one per line to ``path`` (parents created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
    return path


def load_or_build_word_list(shipped: Path) -> list[str]:
    """The word list from ``english_words`` if installed, else the shipped file.

    Raises ``FileNotFoundError`` when neither is available.
    """
    try:
        words = words_from_package()
        log.info("word list: %d words from english_words %s", len(words), "+".join(SOURCES))
        return words
    except ImportError:
        if not shipped.is_file():
            raise FileNotFoundError(
                f"english_words is not installed and {shipped} does not exist"
            ) from None
        log.info("word list: english_words not installed, reading %s", shipped)
        return read_word_list(shipped)
