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


def test_the_private_parts_of_luigis_worker_that_failfastworker_builds_on_are_there():
    """FailFastWorker overrides Luigi's private `_add`, `_add_task`, `_run_task` and `_keep_alive` and reads its
    `_scheduled_tasks`, `_assistant` and `_scheduler`: a Luigi release that renames one would leave textmill's
    override never called (a failed task retried for ever, a run waiting on a lost worker) without an error. This
    fails first, naming what is gone, and so does a signature that no longer takes what the overrides pass on."""
    import inspect

    from luigi.scheduler import Scheduler

    from textmill.workflows.runner import FailFastWorker, Schedulers

    methods = {"_add": ["task", "is_complete"], "_add_task": [], "_run_task": ["task_id"],
               "_keep_alive": ["get_work_response"]}
    for name, parameters in methods.items():
        base = getattr(luigi.worker.Worker, name, None)
        assert callable(base), f"luigi.worker.Worker.{name} is gone"
        assert getattr(FailFastWorker, name) is not base  # textmill's override is the one called
        assert list(inspect.signature(base).parameters)[1:len(parameters) + 1] == parameters, name
    worker = Schedulers().create_worker(Scheduler(), 1)  # not entered: no thread started
    for attribute in ("_scheduled_tasks", "_assistant", "_scheduler"):
        assert hasattr(worker, attribute), f"a Luigi worker has no {attribute}"
