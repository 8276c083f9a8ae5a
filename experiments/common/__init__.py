"""Pieces the studies share: their common flags, progress on stderr, output checks and file notes.

Generic command-line pieces (the parser, list types, ``--out``) live in :mod:`simcore.cliargs` and
:mod:`topologies.cliargs`, where the calibration jobs can use them too.
"""
