"""experiments.reproduce_paper."""
