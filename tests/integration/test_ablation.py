"""`textmill ablate` end to end: two variants of a run file, two seeds each, on the synthetic web. What the
variants share is computed once; every model trains on the same number of tokens; the answer is a table, its
verdicts and a record; a second ablate redoes nothing."""

import json
import re

from support.cli import run_cli
from support.runs import ABLATION, make_run


def test_a_two_variant_ablation_shares_its_stages_and_answers_with_a_table(tmp_path, site):
    config = make_run(tmp_path, site, train="true", train_iters=20)
    config.write_text(config.read_text() + ABLATION)
    r = run_cli("ablate", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    start = lines.index("| variant | documents | tokens | epochs | lambada_passages bits/byte | own_held_out bits/byte | "
                        "eval LAMBADA accuracy |")
    default, long_documents = lines[start + 2], lines[start + 3]
    assert default.startswith("| default (baseline) | ") and long_documents.startswith("| long-documents | ")
    assert sum(line.startswith("long-documents is ") and " default on lambada_passages (bits/byte " in line
               for line in lines) == 1
    assert re.fullmatch(r"ablate: 2 variant\(s\) x 2 seed\(s\) in \d+ s -> .*/work/ablations/[0-9_-]+", lines[-1])

    work = tmp_path / "work"
    units = len(list((work / "1-blacklist").iterdir()))
    assert len(list((work / "2-scrape").iterdir())) == units  # scraped once for the four models
    assert len(list((work / "3-dedup").iterdir())) == 1
    assert len(list((work / "4-clean").iterdir())) == 2  # each variant's cleanup, once for its two seeds
    assert len(list((work / "10-train").iterdir())) == 4 and len(list((work / "11-held-out").iterdir())) == 4

    [folder] = (work / "ablations").iterdir()
    record = json.loads((folder / "ablation.json").read_text())
    seeds = [s for variant in record["variants"] for s in variant["seeds"]]
    assert len({s["trained_tokens"] for s in seeds}) == 1  # the same token budget, whatever each corpus's size
    long_docs = [s["documents"] for s in record["variants"][1]["seeds"]]
    assert long_docs[0] <= record["variants"][0]["seeds"][0]["documents"]
    assert all(0 < s["bits_per_byte"]["lambada_passages"] < 20 for s in seeds)
    assert (folder / "ablation.md").read_text().count("\n| ") == 3

    trained = {p: p.stat().st_mtime_ns for p in (work / "10-train").rglob("*")}
    again = run_cli("ablate", str(config))
    assert again.returncode == 0, again.stderr[-2000:]
    table = again.stdout.splitlines()
    assert table[:4] == lines[start:start + 4]  # the same answer, and nothing else run
    assert {p: p.stat().st_mtime_ns for p in (work / "10-train").rglob("*")} == trained  # nothing trained again


def test_an_ablation_on_a_central_scheduler_with_two_machines_gives_the_same_answer(tmp_path, site):
    """Variants run on the run's machines as any graph does: two `textmill ablate` processes on one luigid (two
    machines, as docs/running.md starts them) share the work and each prints the answer one process gives."""
    import subprocess
    import sys

    from support.runs import central_scheduler

    config = make_run(tmp_path, site, train="true", train_iters=20)
    config.write_text(config.read_text() + ABLATION)
    with central_scheduler(tmp_path) as url:
        command = [sys.executable, "-m", "textmill.cli", "ablate", str(config), "--scheduler-url", url]
        machines = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        answers = [machine.communicate(timeout=900) for machine in machines]
    assert [m.returncode for m in machines] == [0, 0], [err[-2000:] for _, err in answers]
    assert len(list((tmp_path / "work" / "10-train").iterdir())) == 4  # each model trained once, by one of them
    tables = [[line for line in out.splitlines() if line.startswith("| ")] for out, _ in answers]
    assert tables[0] == tables[1] and len(tables[0]) == 3  # the header and a row a variant
    alone = run_cli("ablate", str(config))  # all finished: the same table again
    assert [line for line in alone.stdout.splitlines() if line.startswith("| ")] == tables[0]
