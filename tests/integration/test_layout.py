"""A stage's folder holds its kept documents in sight and everything else in dot-folders, so Hugging Face
`datasets.load_dataset("parquet", data_dir=FOLDER)` reads the corpus and nothing else; folders written in
the earlier layout (NAME.rejects.parquet, NAME.manifest.json, task.json beside the shards) are still read,
and a command or run moves them into place without redoing any work."""

import random

import pyarrow.parquet as pq

from support.cli import run_cli
from support.files import write_jsonl
from support.stages import load_with_datasets
from textmill.demo import synthweb
from textmill.pipeline.shards import list_shards


def write_docs(folder, copies: int = 2) -> None:
    """Two shards of prose in which every tenth document is repeated (so dedup rejects some)."""
    rng = random.Random(7)
    texts = [" ".join(synthweb.prose(rng, 3)) for _ in range(30)]
    for name in ("a", "b"):
        rows = [{"id": f"{name}{i}", "url": f"http://127.0.0.1/{name}/{i}", "text": texts[i % 30 if i % 10 else 0]}
                for i in range(30)]
        write_jsonl(folder / f"{name}.jsonl", rows)


def kept_ids(folder) -> list[str]:
    return sorted(i for shard in list_shards([folder]) for i in pq.read_table(shard, columns=["id"])["id"].to_pylist())


def test_hugging_face_datasets_reads_a_stage_folder_as_its_kept_documents(tmp_path):
    write_docs(tmp_path / "in")
    out = tmp_path / "dedup"
    r = run_cli("dedup", str(tmp_path / "in"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["a.parquet", "b.parquet"]
    for hidden in (".rejects/a.parquet", ".manifests/a.json", ".clusters.json", ".task.json", ".pairs"):
        assert (out / hidden).exists(), hidden
    rejected = pq.read_table(out / ".rejects" / "a.parquet").num_rows
    assert rejected > 0
    ids = load_with_datasets(out, tmp_path / "hf")
    assert ids == kept_ids(out) and len(ids) == 60 - rejected - pq.read_table(out / ".rejects" / "b.parquet").num_rows

    shuffled = tmp_path / "shuffled"  # a shuffle that sizes its shards keeps its plan, also out of sight
    r = run_cli("shuffle", str(out), "-o", str(shuffled), "--target-shard-mb", "0.01")
    assert r.returncode == 0, r.stderr
    assert (shuffled / ".plan.json").exists()
    assert load_with_datasets(shuffled, tmp_path / "hf") == ids


def as_earlier_layout(folder) -> None:
    """Put a stage folder's files where textmill before 0.2 kept them."""
    for kind in ("rejects", "html"):
        for path in (folder / f".{kind}").glob("*.parquet"):
            path.rename(folder / f"{path.stem}.{kind}.parquet")
    for path in (folder / ".manifests").glob("*.json"):
        path.rename(folder / f"{path.stem}.manifest.json")
    for name in ("task.json", "clusters.json", "pairs"):
        (folder / f".{name}").rename(folder / name)
    for empty in (".rejects", ".manifests"):
        (folder / empty).rmdir()


def test_an_earlier_layout_is_read_and_moved_into_place_without_redoing_work(tmp_path):
    write_docs(tmp_path / "in")
    out = tmp_path / "dedup"
    assert run_cli("dedup", str(tmp_path / "in"), "-o", str(out)).returncode == 0
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".textmill" not in p.parts}
    as_earlier_layout(out)
    assert (out / "a.rejects.parquet").exists() and (out / "a.manifest.json").exists()

    assert list_shards([out]) == [out / "a.parquet", out / "b.parquet"]  # read as a finished stage's output
    folder = run_cli("inspect", str(out))
    assert folder.returncode == 0 and "2 shard(s)" in folder.stdout
    rejects = run_cli("inspect", str(out / "a.rejects.parquet"))
    assert rejects.returncode == 0 and "(kept: http://127.0.0.1/" in rejects.stdout

    again = run_cli("dedup", str(tmp_path / "in"), "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert "moved 7 file(s)" in again.stderr and "done in" not in again.stderr  # nothing ran again
    after = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".textmill" not in p.parts}
    assert after == before
