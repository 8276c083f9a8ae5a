"""simcore.workload.loader."""
