"""calibrate.fit."""
