"""experiments.bench."""
