"""simcore.calibration.profile."""
