"""experiments.plan."""
