"""calibrate.testbed."""
