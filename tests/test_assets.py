"""The shipped default assets and the pure functions that generate them.

Nothing here rebuilds or trains the model: the shipped files are checked as
they are, and the generator runs at toy scale into tmp_path.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from afbench.assets import (
    AssetLayout,
    default_assets_dir,
    parse_guess,
    render_feedback,
    score_guess,
    verify_manifest,
    write_manifest,
)
from afbench.assets.__main__ import main as assets_cli
from afbench.assets.dataset import SCHEMA, game_to_row, read_rows, rows_to_messages, write_parquet
from afbench.assets.tokenizer import CHATML_TEMPLATE, render_chatml
from afbench.assets.wordle import ALL_GREEN, MAX_GUESSES, play_games
from afbench.assets.words import is_wordle_word, read_word_list

REPO_ASSETS = Path(__file__).resolve().parents[1] / "assets"
LAYOUT = AssetLayout(REPO_ASSETS)


@pytest.fixture(scope="module")
def words() -> list[str]:
    return read_word_list(LAYOUT.words_file)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_rows(LAYOUT.data_file)


# --- Wordle feedback -------------------------------------------------------


@pytest.mark.parametrize(
    ("guess", "answer", "expected"),
    [
        ("crane", "crane", "GGGGG"),
        ("crane", "fluid", "XXXXX"),
        ("speed", "abide", "XXYXY"),  # abide has one E: only the first E is yellow
        ("eerie", "there", "YXYXG"),  # last E green claims one E, first E takes the other
        ("llama", "hello", "YYXXX"),  # both Ls yellow, hello has two
        ("abbey", "kebab", "YYGYX"),  # green B is counted before the yellow B
        ("geese", "those", "XXXGG"),  # the Es: only the green one, "those" has one E
        ("SPEED", "Abide", "XXYXY"),  # case is folded
    ],
)
def test_score_guess_marks_repeated_letters_like_wordle(guess, answer, expected):
    assert score_guess(guess, answer) == expected


def test_speed_against_abide_marks_only_one_e():
    pattern = score_guess("speed", "abide")
    marked_e = [p for g, p in zip("speed", pattern) if g == "e" and p != "X"]
    assert len(marked_e) == 1


def test_score_guess_marks_min_of_letter_counts_on_random_pairs():
    rng = random.Random(0)
    letters = "aabeelst"  # small alphabet so repeats are common
    for _ in range(2000):
        guess = "".join(rng.choice(letters) for _ in range(5))
        answer = "".join(rng.choice(letters) for _ in range(5))
        pattern = score_guess(guess, answer)
        assert all((p == "G") == (g == a) for g, a, p in zip(guess, answer, pattern))
        for letter in set(guess):
            marked = sum(1 for g, p in zip(guess, pattern) if g == letter and p != "X")
            assert marked == min(guess.count(letter), answer.count(letter))


@pytest.mark.parametrize("bad", ["four", "sixsix", "cr4ne", "crâne"])
def test_score_guess_rejects_non_five_letter_words(bad):
    with pytest.raises(ValueError):
        score_guess(bad, "crane")


def test_render_feedback_aligns_letters_over_marks():
    assert render_feedback("crane", "XYXXG") == "C R A N E\nX Y X X G"


def test_parse_guess_takes_the_last_guess_and_tolerates_missing_brackets():
    assert parse_guess("<think>hmm</think>\n<guess>[Crane]</guess>") == "crane"
    assert parse_guess("<guess>slate</guess> then <guess>[trace]</guess>") == "trace"
    assert parse_guess("no guess here <guess>[toolong]</guess>") is None


# --- word list ---------------------------------------------------------------


def test_word_list_is_sorted_unique_five_letter_lower_case(words):
    raw = LAYOUT.words_file.read_text(encoding="utf-8").splitlines()
    assert raw == sorted(set(raw))
    assert all(is_wordle_word(w) for w in raw)
    assert len(raw) > 5000
    assert {"crane", "abide", "there", "hello"} <= set(raw)


def test_shipped_word_list_matches_english_words_package(words):
    pytest.importorskip("english_words")
    from afbench.assets.words import words_from_package

    assert words == words_from_package()


# --- generated games --------------------------------------------------------------


def _guesses_and_feedback(row: dict) -> tuple[list[str], list[str]]:
    completion = row["completion"]
    roles = [m["role"] for m in completion]
    assert roles == ["assistant", "user"] * (len(completion) // 2)
    guesses = [parse_guess(m["content"]) for m in completion[0::2]]
    return guesses, [m["content"] for m in completion[1::2]]


def test_parquet_has_the_v3_wordle_schema():
    schema = pq.read_schema(LAYOUT.data_file)
    assert schema.names == ["prompt", "completion", "answer", "reward"]
    message = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    assert schema.field("prompt").type == message
    assert schema.field("completion").type == message
    assert schema.field("answer").type == pa.string()
    assert schema.field("reward").type == pa.float64()
    assert pq.read_metadata(LAYOUT.data_file).num_rows == 400


def test_every_shipped_game_follows_wordle_rules(rows, words):
    vocab = set(words)
    answers = [r["answer"] for r in rows]
    assert len(set(answers)) == len(answers)
    for row in rows:
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        answer = row["answer"]
        assert answer in vocab
        guesses, feedback = _guesses_and_feedback(row)
        assert 1 <= len(guesses) <= MAX_GUESSES
        patterns = []
        for guess, text in zip(guesses, feedback):
            assert guess in vocab
            pattern = score_guess(guess, answer)
            assert text.startswith(render_feedback(guess, pattern) + "\n")
            patterns.append(pattern)
        # The solver only guesses words consistent with all earlier feedback.
        for i, guess in enumerate(guesses):
            for prev, prev_pattern in zip(guesses[:i], patterns[:i]):
                assert score_guess(prev, guess) == prev_pattern, (answer, prev, guess)
        solved = patterns[-1] == ALL_GREEN
        assert ALL_GREEN not in patterns[:-1]
        assert row["reward"] == (1.0 if solved else 0.0)
        if not solved:
            assert len(guesses) == MAX_GUESSES


def test_shipped_games_are_mostly_solved_and_fit_the_context(rows):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(LAYOUT.model_dir / "tokenizer.json"))
    solved = sum(r["reward"] for r in rows) / len(rows)
    assert 0.8 <= solved < 1.0  # some lost games keep reward 0.0 in the data
    lengths = [len(tok.encode(render_chatml(rows_to_messages(r))).ids) for r in rows]
    assert 100 <= min(lengths) and max(lengths) <= 700


def test_generator_is_deterministic_and_round_trips_through_parquet(tmp_path, words):
    games = play_games(words, 12, seed=7)
    assert [g.guesses for g in games] == [g.guesses for g in play_games(words, 12, seed=7)]
    assert [g.answer for g in games] != [g.answer for g in play_games(words, 12, seed=8)]
    rows = [game_to_row(g) for g in games]
    path = write_parquet(rows, tmp_path / "data" / "train-00000-of-00001.parquet")
    assert pq.read_schema(path).equals(SCHEMA)
    assert read_rows(path) == rows
    again = write_parquet(
        [game_to_row(g) for g in play_games(words, 12, seed=7)], tmp_path / "b.parquet"
    )
    assert again.read_bytes() == path.read_bytes()


def test_shipped_parquet_is_what_the_generator_makes(rows, words):
    regenerated = [game_to_row(g) for g in play_games(words, len(rows), seed=42)]
    assert regenerated == rows


# --- tiny model -------------------------------------------------------------------------


def test_model_folder_loads_offline_with_the_tiny_qwen3_shape(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(LAYOUT.model_dir, local_files_only=True)
    cfg = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (256, 4, 4)
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size) == (2, 64, 768)
    assert cfg.tie_word_embeddings and cfg.max_position_embeddings == 2048
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert next(model.parameters()).dtype == torch.float32
    n_params = sum(p.numel() for p in model.parameters())
    assert 3.5e6 < n_params < 4.2e6
    logits = model(torch.zeros(2, 16, dtype=torch.long)).logits
    assert logits.shape == (2, 16, cfg.vocab_size)


def test_tokenizer_renders_chatml_and_ends_turns_with_im_end(monkeypatch, rows):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(LAYOUT.model_dir, local_files_only=True)
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "go"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "<|im_start|>system\nrules<|im_end|>\n<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.chat_template == CHATML_TEMPLATE
    full = rows_to_messages(rows[0])
    assert tok.apply_chat_template(full, tokenize=False) == render_chatml(full)
    ids = tok.apply_chat_template(full, tokenize=True, return_dict=False)
    assert tok.decode(ids) == render_chatml(full)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id == im_end and ids.count(im_end) == len(full)
    assert tok.pad_token == "<|endoftext|>" and 2000 <= len(tok) <= 3000
    gen = json.loads((LAYOUT.model_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == im_end and gen["pad_token_id"] == tok.pad_token_id


def test_trained_model_greedily_answers_a_wordle_prompt_with_a_guess(rows):
    from afbench.assets.model import greedy_reply

    reply = greedy_reply(LAYOUT.model_dir, list(rows[0]["prompt"]), max_new_tokens=40)
    guess = parse_guess(reply)
    assert guess is not None and guess.isalpha(), reply


# --- manifest ---------------------------------------------------------------------


def test_shipped_manifest_verifies_and_covers_model_data_and_words():
    assert verify_manifest(LAYOUT.manifest) == []
    listed = {line.split("  ", 1)[1] for line in LAYOUT.manifest.read_text().splitlines()}
    model_files = {
        p.relative_to(REPO_ASSETS).as_posix() for p in LAYOUT.model_dir.iterdir() if p.is_file()
    }
    assert model_files <= listed
    assert {
        "qwen3_tiny/model.safetensors",
        "qwen3_tiny/tokenizer.json",
        "qwen3_tiny/config.json",
    } <= model_files
    assert {"wordle_sample/data/train-00000-of-00001.parquet", "words/wordle_words.txt"} <= listed


def test_tampered_or_missing_file_is_reported(tmp_path):
    copy = tmp_path / "assets"
    shutil.copytree(REPO_ASSETS, copy)
    target = copy / "qwen3_tiny" / "tokenizer_config.json"
    data = bytearray(target.read_bytes())
    data[10] ^= 0x01
    target.write_bytes(bytes(data))
    (copy / "words" / "wordle_words.txt").unlink()
    problems = verify_manifest(copy / "assets.sha256")
    assert len(problems) == 2
    assert any("mismatch" in p and "qwen3_tiny/tokenizer_config.json" in p for p in problems)
    assert any("missing" in p and "words/wordle_words.txt" in p for p in problems)
    assert assets_cli(["verify", "--manifest", str(copy / "assets.sha256")]) == 1


def test_write_manifest_round_trips_and_rejects_outside_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.bin").write_bytes(b"\x00\x01")
    (tmp_path / "b.txt").write_text("b")
    manifest = write_manifest(tmp_path, [tmp_path / "sub" / "a.bin", Path("b.txt")])
    lines = manifest.read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == ["b.txt", "sub/a.bin"]
    assert verify_manifest(manifest) == []
    assert assets_cli(["verify", "--manifest", str(manifest)]) == 0
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("x")
    try:
        with pytest.raises(ValueError):
            write_manifest(tmp_path / "sub", [outside])
    finally:
        outside.unlink()


def test_malformed_manifest_lines_and_missing_manifest_are_problems(tmp_path):
    manifest = tmp_path / "assets.sha256"
    manifest.write_text("not-a-digest  file.txt\n" + "0" * 64 + "  ../escape.txt\n")
    problems = verify_manifest(manifest)
    assert len(problems) == 2 and "escapes" in problems[1]
    assert verify_manifest(tmp_path / "nope.sha256") == [
        f"manifest not found: {tmp_path / 'nope.sha256'}"
    ]


def test_default_assets_dir_is_repo_assets_unless_env_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv("AFBENCH_ASSETS", raising=False)
    assert default_assets_dir() == REPO_ASSETS
    monkeypatch.setenv("AFBENCH_ASSETS", str(tmp_path))
    assert default_assets_dir() == tmp_path.resolve()
    assert AssetLayout.default().manifest == tmp_path.resolve() / "assets.sha256"


def test_game_rows_count_letters_once_per_copy_in_feedback():
    # A solved game's transcript shows the same marks score_guess gives.
    rows = [game_to_row(g) for g in play_games(["eerie", "there", "three", "ether"], 4, seed=3)]
    for row in rows:
        guesses, feedback = _guesses_and_feedback(row)
        marks = [text.splitlines()[1].replace(" ", "") for text in feedback]
        assert marks == [score_guess(g, row["answer"]) for g in guesses]
        assert marks[-1] == ALL_GREEN


def test_word_list_falls_back_to_the_shipped_file_without_english_words(monkeypatch, tmp_path):
    from afbench.assets.words import load_or_build_word_list

    monkeypatch.setitem(__import__("sys").modules, "english_words", None)  # import now fails
    shipped = tmp_path / "wordle_words.txt"
    shipped.write_text("crane\nabide\n")
    assert load_or_build_word_list(shipped) == ["abide", "crane"]
    with pytest.raises(FileNotFoundError):
        load_or_build_word_list(tmp_path / "absent.txt")
