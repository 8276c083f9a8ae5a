"""simcore.compute.roofline."""
