"""Shared test setup: the tests/ directory is importable, so test modules anywhere below
it can ``import model_corpus``."""

import os
import sys

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
