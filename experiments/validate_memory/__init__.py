"""experiments.validate_memory."""
