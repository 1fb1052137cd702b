"""Wordle rules and a deterministic candidate-filtering solver.

Feedback follows the real game: a letter is green (``G``) when it sits in the
right slot, yellow (``Y``) when the answer holds it elsewhere and that copy has
not already been claimed, gray (``X``) otherwise. Repeated letters use the
standard two-pass algorithm: greens first, then yellows limited by the answer's
remaining letter counts.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

WORD_LEN = 5
MAX_GUESSES = 6
GREEN, YELLOW, GRAY = "G", "Y", "X"
ALL_GREEN = GREEN * WORD_LEN

# Openers with common letters; only those present in the word list are used.
OPENERS = ("crane", "slate", "stare", "raise", "arise", "trace", "crate", "least")

_GUESS_RE = re.compile(r"<guess>\s*\[?\s*([A-Za-z]{5})\s*\]?\s*</guess>")


def score_guess(guess: str, answer: str) -> str:
    """Wordle feedback for ``guess`` against ``answer``.

    Both words must be five lower-case letters (upper case is folded).
    Returns a 5-character string over ``G`` (right letter, right slot),
    ``Y`` (in the word, wrong slot) and ``X`` (not in the word, or every copy
    already accounted for), e.g. ``score_guess("speed", "abide") == "XXYXY"``
    with only one E marked because "abide" has one E.

    Raises ``ValueError`` when either word is not five ASCII letters.
    """
    guess, answer = guess.lower(), answer.lower()
    for word in (guess, answer):
        if len(word) != WORD_LEN or not (word.isascii() and word.isalpha()):
            raise ValueError(f"expected a {WORD_LEN}-letter word, got {word!r}")
    result = [GRAY] * WORD_LEN
    unclaimed: Counter[str] = Counter()
    for i, (g, a) in enumerate(zip(guess, answer)):
        if g == a:
            result[i] = GREEN
        else:
            unclaimed[a] += 1
    for i, g in enumerate(guess):
        if result[i] != GREEN and unclaimed[g] > 0:
            result[i] = YELLOW
            unclaimed[g] -= 1
    return "".join(result)


def render_feedback(guess: str, pattern: str) -> str:
    """Two aligned lines for a human: the guess in spaced capitals over its pattern.

    ``render_feedback("crane", "XYXXG") == "C R A N E\\nX Y X X G"``.
    """
    return " ".join(guess.upper()) + "\n" + " ".join(pattern)


def parse_guess(text: str) -> str | None:
    """The last ``<guess>[word]</guess>`` in ``text``, lower-cased; ``None`` if absent.

    The square brackets are optional so a model that drops them still parses.
    """
    found = _GUESS_RE.findall(text)
    return found[-1].lower() if found else None


@dataclass(frozen=True)
class Knowledge:
    """What all feedback so far says about the answer (for the solver's short thought)."""

    greens: tuple[str | None, ...]  # letter fixed at each slot, or None
    present: tuple[str, ...]  # letters known to be in the word but not yet placed
    absent: tuple[str, ...]  # letters known not to be in the word at all

    def describe(self) -> str:
        known = "".join(c or "?" for c in self.greens)
        parts = [f"Known {known}"]
        if self.present:
            parts.append("has " + "".join(self.present))
        if self.absent:
            parts.append("not " + "".join(self.absent))
        return ", ".join(parts)


def summarise(history: Sequence[tuple[str, str]]) -> Knowledge:
    """Fold ``(guess, pattern)`` pairs into greens / present / absent letters."""
    greens: list[str | None] = [None] * WORD_LEN
    seen: set[str] = set()
    gray: set[str] = set()
    for guess, pattern in history:
        for i, (g, p) in enumerate(zip(guess, pattern)):
            if p == GREEN:
                greens[i] = g
                seen.add(g)
            elif p == YELLOW:
                seen.add(g)
            else:
                gray.add(g)
    placed = {c for c in greens if c}
    return Knowledge(
        greens=tuple(greens),
        present=tuple(sorted(seen - placed)),
        # A gray letter that is also green/yellow elsewhere only caps its count.
        absent=tuple(sorted(gray - seen)),
    )


@dataclass
class WordleGame:
    """One finished game: the secret, the guesses in order and their patterns."""

    answer: str
    guesses: list[str] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)

    @property
    def solved(self) -> bool:
        return bool(self.patterns) and self.patterns[-1] == ALL_GREEN


class Solver:
    """Plays by keeping only the candidates consistent with every feedback so far.

    Guess choice: the opener is drawn from ``OPENERS``; afterwards the candidate
    whose distinct letters are most frequent among the remaining candidates,
    drawn at random among the best ``top_k`` so that games vary. All randomness
    comes from the ``random.Random`` passed in, so a fixed seed fixes the games.
    """

    def __init__(self, words: Sequence[str], top_k: int = 3) -> None:
        if not words:
            raise ValueError("empty word list")
        self.words = list(words)
        self.top_k = top_k
        self.openers = [w for w in OPENERS if w in set(self.words)] or [self.words[0]]
        # Feedback partitions of the whole list for each opener: the first
        # filtering step would otherwise dominate generation time.
        self._opener_split: dict[str, dict[str, list[str]]] = {}

    def _split_for(self, opener: str) -> dict[str, list[str]]:
        if opener not in self._opener_split:
            split: dict[str, list[str]] = {}
            for w in self.words:
                split.setdefault(score_guess(opener, w), []).append(w)
            self._opener_split[opener] = split
        return self._opener_split[opener]

    def _pick(self, candidates: list[str], rng: random.Random) -> str:
        freq: Counter[str] = Counter()
        for w in candidates:
            freq.update(set(w))
        ranked = sorted(candidates, key=lambda w: (-sum(freq[c] for c in set(w)), w))
        return rng.choice(ranked[: self.top_k])

    def play(self, answer: str, rng: random.Random) -> WordleGame:
        """Play one game against ``answer`` (must be in the word list)."""
        if answer not in self.words:
            raise ValueError(f"answer {answer!r} is not in the word list")
        game = WordleGame(answer=answer)
        candidates: list[str] = []
        for turn in range(MAX_GUESSES):
            if turn == 0:
                guess = rng.choice(self.openers)
                game.thoughts.append("Open with common letters.")
            else:
                knowledge = summarise(list(zip(game.guesses, game.patterns)))
                guess = self._pick(candidates, rng)
                n = len(candidates)
                game.thoughts.append(
                    f"{knowledge.describe()}. {n} word{'s' if n != 1 else ''} fit."
                )
            pattern = score_guess(guess, answer)
            game.guesses.append(guess)
            game.patterns.append(pattern)
            if pattern == ALL_GREEN:
                break
            if turn == 0:
                candidates = list(self._split_for(guess)[pattern])
            else:
                candidates = [w for w in candidates if score_guess(guess, w) == pattern]
        return game


def play_games(words: Sequence[str], n_games: int, seed: int) -> list[WordleGame]:
    """``n_games`` games with distinct answers drawn from ``words`` by ``seed``.

    Raises ``ValueError`` if ``n_games`` exceeds the number of words.
    """
    if n_games > len(words):
        raise ValueError(
            f"{n_games} games need {n_games} distinct answers; only {len(words)} words"
        )
    rng = random.Random(seed)
    words = sorted(words)
    answers = rng.sample(words, n_games)
    solver = Solver(words)
    return [solver.play(a, rng) for a in answers]
