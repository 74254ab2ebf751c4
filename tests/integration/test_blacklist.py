"""`textmill blacklist`: its summary line and its errors."""

from support.cli import run_cli


def test_cli_summary_and_errors(tmp_path):
    (tmp_path / "urls.txt").write_text("https://example.com/1\nnot a url\n")
    ok = run_cli("blacklist", str(tmp_path / "urls.txt"), "--output", str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stderr
    assert "2 in, 1 kept, 1 rejected (malformed 1)" in ok.stdout
    missing = run_cli("blacklist", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "out"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"textmill: error: input not found: {tmp_path / 'missing.txt'}"]
    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")  # resolving it raised RuntimeError: a traceback
    loop = run_cli("blacklist", str(tmp_path / "loop.txt"), "--output", str(tmp_path / "out"))
    assert loop.returncode == 2 and loop.stderr.strip().splitlines() == [
        f"textmill: error: input {tmp_path / 'loop.txt'} is a symbolic link that leads nowhere (a loop, or a missing target)"]
