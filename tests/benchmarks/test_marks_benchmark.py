"""benchmarks/marks.py: its table replaces its own block of the page only; a tiny run produces every row."""

from __future__ import annotations

import pytest

from benchmarks.marks import Setup, main, parse_args, train, write_table
from ema.data import make_splits

ROWS = [("mark detected", ">= 0.99", "1.000 (2/2)")]


def test_write_table_replaces_its_own_block_only(tmp_path):
    page = tmp_path / "MARKS.md"
    page.write_text("intro\n<!-- marks-table -->\nold\n<!-- /marks-table -->\n<!-- marks-table-colour-32 -->\nkeep\n")
    write_table(ROWS, parse_args(["--keys", "2"]), 120.0, page)
    text = page.read_text()
    assert "old" not in text and "keep" in text and text.startswith("intro\n")
    assert "`python -m benchmarks.marks --keys 2 --clean-keys 200" in text and "| mark detected | >= 0.99 |" in text


def test_write_table_appends_a_colour_block_the_page_lacks(tmp_path):
    page = tmp_path / "MARKS.md"
    page.write_text("intro\n")
    write_table(ROWS, parse_args(["--colour", "32"]), 60.0, page)
    assert "<!-- marks-table-colour-32 -->" in page.read_text() and "--colour 32" in page.read_text()
    write_table(ROWS, parse_args(["--colour", "32", "--arch", "cnn", "--epochs", "10"]), 60.0, page)
    assert page.read_text().count("<!-- marks-table-colour-32 -->") == 1
    assert "--epochs 10 --threads 1 --arch cnn --colour 32`" in page.read_text(), "the paper's rate is not written"
    write_table(ROWS, parse_args(["--colour", "32", "--arch", "cnn", "--lr", "0.025"]), 60.0, page)
    assert "--arch cnn --lr 0.025 --colour 32`" in page.read_text()


def test_a_rate_no_recipe_takes_is_refused_before_training(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--lr", "-0.1"])
    assert "expected lr to be a finite number > 0, got -0.1" in capsys.readouterr().err


def test_the_learning_rate_reaches_the_recipe(monkeypatch):
    seen = {}
    monkeypatch.setattr("ema.training.fit.fit", lambda spec, *data, **options: seen.setdefault("spec", spec))
    splits = make_splits(0)
    args = parse_args(["--lr", "0.025", "--lr-decay", "0.001", "--arch", "cnn"])
    setup = Setup(splits, splits.held_out, 0.1, 0.05, 2, args.arch, lr_decay=args.lr_decay, lr=args.lr)
    train(splits, 3, setup)
    assert (seen["spec"].lr, seen["spec"].lr_decay, seen["spec"].seed) == (0.025, 0.001, 3)
    assert Setup(splits, splits.held_out, 0.1, 0.05, 2, "mlp").lr == 0.05, "the paper's rate by default"


@pytest.mark.slow
def test_a_tiny_run_writes_every_row(tmp_path):
    page = tmp_path / "MARKS.md"
    main(
        ["--keys", "1", "--clean-keys", "2", "--unmarked", "1", "--unlearned", "1", "--epochs", "1", "--out", str(page)]
    )
    table = page.read_text()
    for row in ("mark detected", "clean target", "retrain without M1", "wrong key", "after scrub", "accuracy drop"):
        assert row in table, row
