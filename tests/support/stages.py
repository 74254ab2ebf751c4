"""Inputs for the corpus stages' tests, and the stages run as their commands run them (in this process)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from support.files import write_jsonl


def url_shard(tmp_path: Path, urls: list[str]) -> Path:
    """The blacklist stage's shard of `urls`, as the scrape stage reads it."""
    from textmill.pipeline.blacklist import BlacklistConfig
    from textmill.workflows.commands import run_stage

    (tmp_path / "urls.txt").write_text("\n".join(urls) + "\n")
    run_stage("blacklist", [tmp_path / "urls.txt"], tmp_path / "bl", {"blacklist": BlacklistConfig()})
    return tmp_path / "bl" / "urls-00000.parquet"


def shuffle_inputs(tmp_path: Path) -> list[Path]:
    """Three JSON-lines files of 200 documents, the second with a broken line at its end (601 records)."""
    for s in range(3):
        write_jsonl(tmp_path / "in" / f"s{s}.jsonl", [{"id": f"{s}-{i}", "text": f"doc {s} {i}"} for i in range(200)])
    with open(tmp_path / "in" / "s1.jsonl", "a") as f:
        f.write("{broken\n")
    return sorted((tmp_path / "in").iterdir())


def shuffle_shards(inputs, output, num_shards, seed):
    """`textmill shuffle` as its tasks run it; the output shards' manifests."""
    from textmill.pipeline.stage_configs import ShuffleConfig
    from textmill.workflows.commands import run_stage

    return run_stage("shuffle", inputs, output, {"shuffle": ShuffleConfig(num_shards=num_shards, seed=seed)}).manifests


def load_with_datasets(folder, cache, builder: str = "parquet") -> list[str]:
    """The ids `datasets.load_dataset(builder, data_dir=folder)` reads (in a process of its own, offline)."""
    code = ("import datasets, json, sys\n"
            "d = datasets.load_dataset(sys.argv[3], data_dir=sys.argv[1], split='train', cache_dir=sys.argv[2])\n"
            "print(json.dumps(sorted(d['id'])))\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(cache)}
    r = subprocess.run([sys.executable, "-c", code, str(folder), str(cache), builder], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.splitlines()[-1])
