"""experiments.what_if."""
