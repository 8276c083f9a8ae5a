"""simcore.staleness.distribution."""
