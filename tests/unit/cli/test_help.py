"""Every command's `--help` explains every option."""

import argparse

import pytest

from textmill.cli import build_parser

COMMANDS = ["blacklist", "scrape", "dedup", "clean", "shuffle", "decontaminate", "tokenize", "train-tokenizer",
            "merge-datasets", "train", "run", "status", "scheduler", "serve", "generate", "demo", "schedule", "slurm"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_documents_every_option(command, capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args([command, "--help"])
    assert exit.value.code == 0
    text = capsys.readouterr().out
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        if action.option_strings and action.dest != "help" and action.help != argparse.SUPPRESS:  # not an old spelling
            assert action.help and action.option_strings[-1] in text


def test_a_default_is_said_once_and_none_is_not_said():
    """`(default: None)` says nothing, and a help that names its default must not get a second one."""
    parser = build_parser()
    for command, sub in parser._subparsers._group_actions[0].choices.items():
        text = sub.format_help()
        assert "(default: None)" not in text, command
        assert all(option.count("(default:") < 2 for option in " ".join(text.split()).split(" --")), command


@pytest.mark.parametrize("argv, usage", [
    (["scrape", "urls.txt", "-o", "out", "--wrokers", "2"], "usage: textmill scrape"),
    (["scrape", "urls.txt", "-o", "out", "--worker", "2"], "usage: textmill scrape"),  # no prefix of --workers
    (["export", "hf", "--load", "ckpt", "--output", "hf", "--vocab", "v.json"], "usage: textmill export hf"),
])
def test_an_unknown_option_is_the_commands_error_with_its_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments: " + " ".join(argv[-2:]) in err
