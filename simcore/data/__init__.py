"""Data files shipped with simcore (device specs); read with :mod:`importlib.resources`."""
