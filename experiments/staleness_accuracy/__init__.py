"""experiments.staleness_accuracy."""
