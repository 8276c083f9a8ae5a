"""experiments.check_shards."""
