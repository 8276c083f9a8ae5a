"""calibrate.train."""
