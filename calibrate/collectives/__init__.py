"""calibrate.collectives."""
