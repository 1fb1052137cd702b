"""Generated-text sanity rules: empty -> failed, loops and undecodable tokens -> warning."""

from afbench.analysis.sanity import repetition_loop, sanity_check


def test_clean_text_is_ok():
    res = sanity_check(["<guess>[crane]</guess>"], [[5, 6, 7, 8, 9]])
    assert res["status"] == "ok" and res["counts"] == {"ok": 1, "warning": 0, "failed": 0}


def test_empty_output_fails():
    res = sanity_check(["", "   "], [[], [3]])
    assert res["status"] == "failed" and res["empty"] == 2


def test_single_token_loop_warns_after_eight_repeats():
    assert repetition_loop([1, 2] + [9] * 8) == 1
    assert repetition_loop([1, 2] + [9] * 7) is None


def test_phrase_loop_warns():
    assert repetition_loop([0] + [4, 5, 6] * 4) == 3
    res = sanity_check(["abc abc abc abc"], [[4, 5, 6] * 4])
    assert res["status"] == "warning" and res["repetition_loops"] == 1


def test_undecodable_characters_warn():
    res = sanity_check(["ok \ufffd"], [[1, 2, 3]])
    assert res["status"] == "warning" and res["undecodable"] == 1


def test_failed_wins_over_warning():
    res = sanity_check(["", "x \ufffd"], [[], [1]])
    assert res["status"] == "failed"
    assert res["counts"] == {"ok": 0, "warning": 1, "failed": 1}
