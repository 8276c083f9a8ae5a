"""simcore.net."""
