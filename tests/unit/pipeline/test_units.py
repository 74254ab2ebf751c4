"""URL lists cut into units: every line in exactly one unit, in order, whatever the unit size, block size,
line ends or compression; a unit's hash changes only with its own lines."""

import bz2
import gzip
import lzma

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textmill.errors import TextmillError
from textmill.pipeline import units as units_module
from textmill.pipeline.units import cut_lines, document_units, read_unit_lines, url_units, write_unit

LINE = st.sampled_from(["https://a.example.com/1", "", "\r", "x\ry", "http://b.example.org/p?q=1", " "])


def one_pass(data: bytes) -> list[tuple[int, bytes]]:
    """(line number, line) as reading the whole list line by line gives them."""
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    return [(n, line.rstrip(b"\r")) for n, line in enumerate(lines, 1)]


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=40), end=st.sampled_from(["", "\n", "\r\n"]), size=st.integers(1, 8),
       block=st.sampled_from([1, 3, 7, 1 << 20]), compression=st.sampled_from(["", ".gz", ".bz2"]))
def test_units_hold_every_line_once_in_order(tmp_path_factory, lines, end, size, block, compression):
    data = "\n".join(lines).encode() + end.encode() if lines else end.encode()
    path = tmp_path_factory.mktemp("units") / f"list.txt{compression}"
    path.write_bytes({"": lambda d: d, ".gz": gzip.compress, ".bz2": bz2.compress}[compression](data))
    original, units_module._BLOCK = units_module._BLOCK, block
    try:
        units = cut_lines(path, size, "list")
    finally:
        units_module._BLOCK = original
    assert [line for unit in units for line in read_unit_lines(unit)] == one_pass(data)
    assert [u.number for u in units] == list(range(len(units))) and units
    assert all(u.lines == size for u in units[:-1]) and units[-1].lines <= size
    assert [u.first_line for u in units] == [1 + k * size for k in range(len(units))]


def test_lines_added_at_the_end_change_only_the_last_unit_and_add_new_ones(tmp_path):
    path = tmp_path / "clean_urls.txt"
    path.write_text("".join(f"https://example.com/{i}\n" for i in range(25)))
    before = cut_lines(path, 10, "clean_urls")
    path.write_text("".join(f"https://example.com/{i}\n" for i in range(32)))
    after = cut_lines(path, 10, "clean_urls")
    assert [u.name for u in after] == ["clean_urls-00000", "clean_urls-00001", "clean_urls-00002", "clean_urls-00003"]
    assert after[:2] == before[:2]
    assert after[2].sha256 != before[2].sha256 and after[2].lines == 10 and after[3].lines == 2


def test_a_cut_is_remembered_on_disk_and_made_again_when_the_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTMILL_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "urls.txt"
    path.write_text("https://example.com/1\nhttps://example.com/2\n")
    first = url_units(path, 1)
    units_module._units.cache_clear()  # another process: only the file on disk remembers
    cuts = []
    monkeypatch.setattr(units_module, "cut_lines", lambda *a: cuts.append(a) or ())
    assert url_units(path, 1) == first and not cuts
    path.write_text("https://example.com/1\n")
    units_module._units.cache_clear()
    url_units(path, 1)
    assert len(cuts) == 1


def test_a_list_edited_in_place_with_its_time_put_back_is_cut_again(tmp_path, monkeypatch):
    """`cp -p` or `rsync -t` over a list: the same size and modification time, other URLs. The cut is made again
    (its cache is keyed by the inode's change time too), so the new URL is in the units."""
    import os
    import time

    monkeypatch.setenv("TEXTMILL_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "urls.txt"
    path.write_text("https://example.com/1\nhttps://example.com/2\n")
    before = path.stat()
    first = url_units(path, 1)
    time.sleep(0.01)
    path.write_text("https://example.com/1\nhttps://example.com/9\n")  # the same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and its modification time put back
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    units_module._units.cache_clear()  # another process: only the file on disk remembers
    again = url_units(path, 1)
    assert again[0].sha256 == first[0].sha256 and again[1].sha256 != first[1].sha256


def test_a_compressed_list_is_read_unit_by_unit_from_the_copies_its_cut_keeps(tmp_path, monkeypatch):
    """Reading a unit of a compressed list from the stream means decompressing everything before it: the
    cut keeps each unit's bytes, and a machine without them (or with a damaged one) reads the stream."""
    monkeypatch.setenv("TEXTMILL_CACHE", str(tmp_path / "cache"))
    data = "".join(f"https://example.com/{i}\n" for i in range(50)).encode()
    path = tmp_path / "clean_urls.txt.xz"
    path.write_bytes(lzma.compress(data))
    units = cut_lines(path, 7, "clean_urls")
    opener = units_module.open_url_list

    def no_stream(_path):
        raise AssertionError("read the compressed list again")

    monkeypatch.setattr(units_module, "open_url_list", no_stream)
    assert [line for unit in units for line in read_unit_lines(unit)] == one_pass(data)
    monkeypatch.setattr(units_module, "open_url_list", opener)
    units_module.kept_copy(units[2].sha256).write_bytes(b"https://damaged.example.com/\n")
    units_module.kept_copy(units[5].sha256).unlink()
    assert [line for unit in units for line in read_unit_lines(unit)] == one_pass(data)


def test_a_list_changed_after_it_was_cut_is_one_error(tmp_path):
    path = tmp_path / "urls.txt"
    path.write_text("https://example.com/1\nhttps://example.com/2\n")
    unit = cut_lines(path, 1, "list")[1]
    path.write_text("https://example.com/1\nhttps://example.com/3\n")
    with pytest.raises(TextmillError, match="changed while it was being read"):
        list(read_unit_lines(unit))


def test_a_document_file_no_bigger_than_a_unit_is_read_in_place(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(f'{{"text": "document {i}"}}\n' for i in range(5)))
    assert document_units(path, 5) == (path,)
    assert [u.name for u in document_units(path, 2)] == ["docs-00000", "docs-00001", "docs-00002"]


def test_a_parquet_unit_holds_its_rows_whatever_the_row_groups(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "export.parquet"
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(23)]}), path, row_group_size=4)
    units = document_units(path, 10)
    assert [(u.first_row, u.rows) for u in units] == [(0, 10), (10, 10), (20, 3)]
    for unit in units:
        write_unit(unit, tmp_path / f"{unit.name}.parquet")
    texts = [t for u in units for t in pq.read_table(tmp_path / f"{u.name}.parquet").column("text").to_pylist()]
    assert texts == [f"document {i}" for i in range(23)]
