"""An unknown key's error always lists what is allowed, even when nothing is."""

from __future__ import annotations

import pytest

from simcore.errors import TrainsimError
from simcore.workload.models import check_keys


def test_a_mapping_that_takes_no_keys_says_so() -> None:
    with pytest.raises(TrainsimError, match=r"unknown key 'x'; allowed keys: none \(it takes no keys\)$"):
        check_keys({"x": 1}, (), (), "layer relu")


def test_allowed_keys_are_listed() -> None:
    with pytest.raises(TrainsimError, match=r"allowed keys: a, b$"):
        check_keys({"x": 1}, ("a",), ("b",), "layer")
