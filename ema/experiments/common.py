"""What more than one study shares: the benchmark recipe (imports no mlflow: `ema grid --help` reads it)."""

from ema.training.spec import TrainSpec

#: The paper's benchmark recipe (MLP (256, 256), SGD, lr 0.05, 50 epochs).
BENCHMARK_RECIPE = TrainSpec()
