"""``python -m benchmarks.matching`` runs on a small table and says both ways kept the same rows."""

from benchmarks.matching import main


def test_matching_keeps_the_same_rows_both_ways_on_a_small_table(capsys):
    main(["--rows", "400", "--repeats", "1"])
    assert "300 rows kept by both" in capsys.readouterr().out
