"""experiments.validate_parallel."""
