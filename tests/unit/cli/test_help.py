"""Every command's `--help` explains every option."""

import argparse

import pytest

from textmill.cli import build_parser

COMMANDS = ["blacklist", "scrape", "dedup", "clean", "shuffle", "decontaminate", "tokenize", "train-tokenizer",
            "merge-datasets", "train", "run", "status", "scheduler", "serve", "generate", "demo", "schedule"]


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
