"""experiments.validate."""
