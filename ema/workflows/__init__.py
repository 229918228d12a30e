"""The use cases a user runs: the only place that wires data, training, oracles, auditors and tracking."""
