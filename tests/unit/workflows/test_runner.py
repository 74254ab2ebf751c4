"""Luigi set up for unattended runs (workflows/runner.py): what its log says when a central scheduler is away."""

import logging
import warnings

import luigi

from textmill.workflows.runner import OneLineForKnownErrors, configure_luigi


def test_a_scheduler_retry_warning_prints_no_empty_traceback_and_the_retry_options_raise_no_warning():
    """Luigi warns of each failed request to luigid with exc_info=True outside an exception: logging printed
    "NoneType: None" under every such line. Its rpc-retry options, set by configure_luigi, are read by Luigi
    but not declared by its [core] class, which warned on every task."""
    record = logging.LogRecord("luigi-interface", logging.WARNING, __file__, 1,
                               "Failed connecting to remote scheduler %r", ("http://127.0.0.1:1",), (None, None, None))
    assert OneLineForKnownErrors().filter(record)
    assert logging.Formatter().format(record) == "Failed connecting to remote scheduler 'http://127.0.0.1:1'"
    configure_luigi()
    assert luigi.configuration.get_config().getint("core", "rpc_retry_wait") == 5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        configure_luigi()  # its filter goes in front of the "default" one
        luigi.task.Config()  # any task reads the configuration, as each task of a run does
        luigi.interface.core()
    assert not [w for w in caught if "rpc_retry" in str(w.message)], [str(w.message) for w in caught]
