"""A stage command's exit status is one a script can trust: a command that kept nothing (an empty URL list, or
one whose every line is rejected) prints its summary and exits 1."""

from textmill.cli import main


def test_an_empty_url_list_keeps_nothing_and_exits_1(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    assert main(["blacklist", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "out")]) == 1
    out, err = capsys.readouterr()
    assert "blacklist: 1 shard(s), 0 in, 0 kept, 0 rejected (none)" in out
    assert err.strip().splitlines()[-1] == ("textmill: error: blacklist read no records: its input holds none "
                                            "(an empty list or folder?)")


def test_a_list_of_nothing_but_garbage_keeps_nothing_and_exits_1(tmp_path, capsys):
    (tmp_path / "garbage.txt").write_text("not a url\nftp://example.com/x\n\x00\x01\n")
    assert main(["blacklist", str(tmp_path / "garbage.txt"), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("textmill: error: blacklist kept none of the 3 records it read (")
    assert err.endswith(f"the rejects and their reasons: textmill inspect {tmp_path / 'out'}")


def test_a_list_with_one_good_url_exits_0(tmp_path, capsys):
    (tmp_path / "mixed.txt").write_text("not a url\nhttps://example.com/page\n")
    assert main(["blacklist", str(tmp_path / "mixed.txt"), "-o", str(tmp_path / "out")]) == 0
    assert "2 in, 1 kept, 1 rejected" in capsys.readouterr().out
