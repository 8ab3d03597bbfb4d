"""Session review 25b: logging inside a jitted function (56af505).

A record written while tracing is written again by the eager run when the trace then gives
up, and skipped by compiled calls when it does not: ``Logger.log`` with its level given by
keyword (``log.log(level=logging.WARNING, msg=...)``) passed the front end's check, which
read the level from the positional arguments only, so the first call wrote its record twice
(the trace's, then eager's).
"""

import logging

import numpy as np
import pytest

import tracejit as tj


def logs_by_keyword_level(x):
    logging.getLogger("tracejit_test_review25b").log(level=logging.WARNING, msg="step")
    return x * 2


def logs_by_keyword_message(x):
    logging.getLogger("tracejit_test_review25b").log(logging.WARNING, msg="step")
    return x * 2


@pytest.mark.parametrize("function", [logs_by_keyword_level, logs_by_keyword_message])
def test_a_record_with_its_level_by_keyword_is_written_once_a_call(function, caplog):
    compiled = tj.jit(function, cache="memory")
    for scale in [1.0, 2.0, 3.0]:
        x = np.ones(2) * scale
        caplog.clear()
        function(x)
        eager = [record.getMessage() for record in caplog.records]
        caplog.clear()
        np.testing.assert_array_equal(compiled(x), x * 2)
        got = [record.getMessage() for record in caplog.records
               if not record.name.startswith("tracejit.")]
        assert got == eager, (scale, got, eager)
