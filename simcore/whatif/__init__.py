"""simcore.whatif.sweep."""
