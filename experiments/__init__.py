"""User-facing entry points: ``python -m experiments.<name>``."""
