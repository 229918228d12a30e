"""Everything MLflow: runs, params, metrics, artifacts, the model registry, the calibration cache."""
