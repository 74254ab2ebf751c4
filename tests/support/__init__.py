"""What both test lanes share: files and data, the `textmill` command in a subprocess, run files, small
models and the pages and servers they are tested on. Fixtures live in tests/conftest.py."""
