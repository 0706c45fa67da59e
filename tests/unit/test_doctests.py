"""The Example sections of dpsql's docstrings run as tests."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import dpsql

MODULES = sorted(m.name for m in pkgutil.walk_packages(dpsql.__path__, "dpsql.")
                 if m.name != "dpsql.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
