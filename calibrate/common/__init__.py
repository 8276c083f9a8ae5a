"""calibrate.common."""
