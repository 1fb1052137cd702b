"""Wordle SFT rows in the schema of ``willcb/V3-wordle`` and their parquet file.

Schema (one row per game), as in the real dataset:

- ``prompt``: list of ``{role, content}``: the system message with the rules,
  then the first user message;
- ``completion``: alternating assistant / user messages: each assistant turn
  is a short thought plus ``<guess>[word]</guess>``, each user turn the
  feedback for that guess (so the list has ``2 * n_guesses`` entries);
- ``answer``: the secret word (str);
- ``reward``: float64, 1.0 solved within six guesses, 0.0 not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from afbench.assets.wordle import ALL_GREEN, MAX_GUESSES, WordleGame, render_feedback

SYSTEM_PROMPT = (
    "You are playing Wordle. Find the secret five-letter English word in at most "
    f"{MAX_GUESSES} guesses. After each guess you get one mark per letter: "
    "G = right letter, right spot; Y = in the word, wrong spot; X = not in the word "
    "(or no more copies of it). Think briefly inside <think>...</think>, then give "
    "your guess as <guess>[word]</guess>."
)
FIRST_USER_MESSAGE = f"New game. You have {MAX_GUESSES} guesses. Make your first guess."

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])
SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(MESSAGE_TYPE)),
        ("completion", pa.list_(MESSAGE_TYPE)),
        ("answer", pa.string()),
        ("reward", pa.float64()),
    ]
)


def assistant_turn(thought: str, guess: str) -> str:
    """The assistant's text for one guess: ``<think>..</think>`` then ``<guess>[word]</guess>``."""
    return f"<think>{thought}</think>\n<guess>[{guess}]</guess>"


def feedback_turn(guess: str, pattern: str, turn: int, answer: str) -> str:
    """The user's reply to guess number ``turn`` (1-based)."""
    text = render_feedback(guess, pattern)
    if pattern == ALL_GREEN:
        return f"{text}\nSolved in {turn}!"
    left = MAX_GUESSES - turn
    if left == 0:
        return f"{text}\nNo guesses left. The word was {answer}."
    return f"{text}\nGuesses left: {left}."


def game_to_row(game: WordleGame) -> dict[str, Any]:
    """One dataset row (see module docstring) for a finished game."""
    prompt = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": FIRST_USER_MESSAGE},
    ]
    completion: list[dict[str, str]] = []
    for turn, (thought, guess, pattern) in enumerate(
        zip(game.thoughts, game.guesses, game.patterns), start=1
    ):
        completion.append({"role": "assistant", "content": assistant_turn(thought, guess)})
        completion.append(
            {"role": "user", "content": feedback_turn(guess, pattern, turn, game.answer)}
        )
    return {
        "prompt": prompt,
        "completion": completion,
        "answer": game.answer,
        "reward": 1.0 if game.solved else 0.0,
    }


def rows_to_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    """``prompt + completion`` as one chat (content given as a list is joined with newlines)."""
    messages = []
    for m in list(row["prompt"]) + list(row["completion"]):
        content = m["content"]
        if not isinstance(content, str):
            content = "\n".join(str(c) for c in content)
        messages.append({"role": str(m["role"]), "content": content})
    return messages


def write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` with :data:`SCHEMA` to ``path`` (parents created); returns ``path``.

    Written from a pyarrow table (no pandas metadata) so the bytes depend only
    on the rows and the pyarrow version.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(list(rows), schema=SCHEMA)
    pq.write_table(table, path, compression="snappy")
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a Wordle parquet as plain Python lists/dicts (not numpy arrays)."""
    return pq.read_table(path).to_pylist()
