"""The tasks the variants of an ablation share (textmill.variants): one task, not one per variant.

A task of a variant writes into the folder its key names, and a stage the variant does not change has the key it
has in the other variants (keys hold settings and inputs, never the run file's name), so its output is theirs.
To Luigi, though, a task is its parameters, and a variant's `config` differs: the scheduler would hand the same
stage to two workers at once, and both would write its folder. So a task is made as the first variant (the
baseline's first seed, then the others in order) whose task of the same class and parameters has the same key:
a stage shared by every variant is the baseline's task in every variant's graph, scheduled and run once.
"""

from __future__ import annotations

from luigi.task_register import Register

from textmill.variants import MARK


class SharedAcrossVariants(Register):
    """Luigi's task metaclass, which also makes a variant's task as the first variant whose task has its key, and
    hands out a task asked for again with the same arguments without Luigi's parsing of them (about 14 µs a task, and
    a large graph's walk asks for each task 15 times: every band of dedup requires every unit's keys)."""

    def __call__(cls, *args, **kwargs):
        from textmill.workflows.memos import TASKS_MADE

        asked = (cls, args, tuple(sorted(kwargs.items())))
        try:
            return TASKS_MADE[asked]
        except KeyError:
            made = TASKS_MADE[asked] = shared(super().__call__(*args, **kwargs))
            return made
        except TypeError:  # an argument that cannot be a key (none of textmill's tasks takes one)
            return shared(super().__call__(*args, **kwargs))


def shared(task):
    """`task`, or the task of the same class and parameters of the first variant of its ablation whose key is
    `task`'s (itself made so)."""
    config = getattr(task, "config", None)
    if not isinstance(config, str) or MARK not in config:
        return task
    from textmill.workflows.memos import run_config

    settings = run_config(config)
    for sibling in settings.ablation.configs(settings.path):
        if sibling == config:
            return task
        twin = type(task)(**{**task.param_kwargs, "config": sibling})
        if twin.key() == task.key():
            return twin
    return task
