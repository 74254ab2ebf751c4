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
