"""Where the repository and the test data are, for tests at any depth of the tree."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
