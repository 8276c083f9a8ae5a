"""experiments.validate_published: trainsim's predictions against published GPU measurements."""
