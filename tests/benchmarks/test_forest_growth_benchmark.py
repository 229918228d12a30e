"""``python -m benchmarks.forest_growth`` runs on a small table and says both fits grew the same forest."""

from benchmarks.forest_growth import main


def test_forest_growth_benchmark_grows_the_same_forest_both_ways_on_a_small_table(capsys):
    main(["--rows", "300", "--repeats", "1"])
    assert "same trees and bitwise equal probabilities: True" in capsys.readouterr().out
