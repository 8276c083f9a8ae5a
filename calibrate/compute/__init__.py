"""calibrate.compute."""
