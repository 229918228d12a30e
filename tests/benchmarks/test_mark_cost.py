"""benchmarks/mark_cost.py: paired drops summarised per variant, its block written, its options checked."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.mark_cost import UNMARKED, fold_copy, main, parse_args, splits_for, summary_rows, write_table


def test_summary_rows_are_the_paired_drops_in_points_with_their_interval():
    accuracies = {
        UNMARKED: np.array([0.90, 0.80, 0.85]),
        "decoys": np.array([0.89, 0.80, 0.86]),
        "plain": np.array([0.80, 0.71, 0.75]),
    }
    decoys, plain = summary_rows(accuracies, ("decoys", "plain"))
    assert decoys[0] == "decoys" and decoys[1] == "0.00" and decoys[3] == "1.00, 0.00, -1.00" and decoys[-1] == "met"
    low, high = (float(v) for v in decoys[2].split(" to "))
    assert low < 0 < high, "three pairs that cancel: an interval around zero"
    assert plain[1] == "9.67" and float(plain[2].split(" to ")[0]) > 8 and plain[-1] == "NOT met"
    (withheld,) = summary_rows({UNMARKED: accuracies[UNMARKED], "withheld": accuracies["decoys"]}, ("withheld",))
    assert withheld[1] == "0.00" and withheld[-1] == "(not a mark)", "no goal for a copy that marks nothing"


def test_write_table_replaces_its_own_block_only(tmp_path):
    page = tmp_path / "MARKS.md"
    page.write_text("intro\n<!-- mark-cost-colour-32 -->\nold\n<!-- /mark-cost-colour-32 -->\n<!-- marks-table -->\n")
    argv = ["--pairs", "3", "--colour", "32", "--arch", "cnn", "--lr-decay", "0.001", "--lr", "0.025"]
    args = parse_args([*argv, "--out", str(page)])
    write_table([("decoys", "0.10", "-1.00 to 1.20", "0.1", "0.9", "90.0% / 90.1%", "met")], args, 90.0)
    text = page.read_text()
    assert "old" not in text and "<!-- marks-table -->" in text and "| decoys | 0.10 |" in text
    assert "`python -m benchmarks.mark_cost --pairs 3 --variants decoys,plain --arch cnn" in text
    assert "--lr-decay 0.001 --lr 0.025 --colour 32`" in text
    write_table([], parse_args(["--colour", "32", "--out", str(page)]), 90.0)
    assert "--workers 1 --colour 32`" in page.read_text(), "the paper's rate is not written"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--variants", "decoys,stripes"], "expected --variants among decoys, plain, withheld"),
        (["--pairs", "1"], "expected --pairs of at least 2"),
        (["--lr", "0"], "expected lr to be a finite number > 0, got 0"),
        (["--lr-decay", "nan"], "expected lr_decay to be a finite number"),
    ],
)
def test_bad_options_are_refused_saying_what_was_expected(capsys, argv, said):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert said in capsys.readouterr().err


def test_grey_runs_train_the_copy_as_marked_only_colour_runs_both():
    assert parse_args([]).variants == ("decoys",) and parse_args(["--colour", "32"]).variants == ("decoys", "plain")


def test_the_withheld_fold_is_m1_less_the_rows_the_key_relabels_and_nothing_stamped():
    fold = splits_for(0).folds[0]
    marked = fold_copy(fold, 3, "decoys")
    withheld = fold_copy(fold, 3, "withheld")
    relabelled = marked.y != fold.y
    assert len(withheld) == len(fold) - relabelled.sum() == 900
    assert np.array_equal(withheld.index, fold.index[~relabelled])
    assert np.array_equal(withheld.x, fold.x[~relabelled]) and np.array_equal(withheld.y, fold.y[~relabelled])


@pytest.mark.slow
def test_a_tiny_run_trains_every_pair_in_two_processes(tmp_path):
    page = tmp_path / "MARKS.md"
    main(["--pairs", "2", "--epochs", "1", "--workers", "2", "--colour", "12", "--arch", "cnn", "--out", str(page)])
    table = page.read_text()
    assert "<!-- mark-cost-colour-12 -->" in table and "| decoys |" in table and "| plain |" in table
