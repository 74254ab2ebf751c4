"""`python -m textmill.trainer ARGS` is `textmill train ARGS` (the form torchrun launches)."""

import sys

from textmill.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
