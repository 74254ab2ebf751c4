"""report.html as a browser shows it (headless Chromium)."""

import pytest

from support.cli import run_cli
from support.runs import copy_run, write_config


def browser() -> str | None:
    import shutil

    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def headless(*args: str) -> str:
    import subprocess

    r = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.skipif(browser() is None, reason="no Chromium here (Debian: apt-get install chromium)")
def test_the_report_renders_in_a_real_browser_with_examples_pairs_cuts_and_training(tmp_path, finished_run):
    import re

    from matplotlib.image import imread

    config = copy_run(finished_run.root, tmp_path)
    write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=10)
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]
    report = tmp_path / "work" / "report.html"
    page = report.read_text()
    # A probe reads what the browser made of the page: images decoded, sections, links.
    probe = tmp_path / "work" / "probe.html"
    probe.write_text(page.replace("</body>", "<script>document.title = [...document.images].filter(i => i.complete && "
                                  "i.naturalWidth > 0).length + '/' + document.images.length + ' | ' + "
                                  "[...document.querySelectorAll('h2')].map(h => h.textContent).join(' | ')"
                                  " + ' | links ' + document.links.length;</script></body>"))
    title = re.search(r"<title>(.*?)</title>", headless("--dump-dom", probe.as_uri()), re.S).group(1)
    decoded, total = map(int, title.split(" | ")[0].split("/"))
    assert decoded == total >= 6, title
    for section in ("Corpus funnel", "Examples", "Near-duplicate clusters", "Decontamination", "Documents", "Training",
                    "Evaluation", "Time per stage"):
        assert f"| {section}" in title, title
    assert int(title.rsplit("links ", 1)[1]) > 20
    shot = tmp_path / "report.png"
    headless(f"--screenshot={shot}", "--window-size=1280,5000", report.as_uri())
    pixels = imread(shot)
    assert pixels.shape[0] == 5000 and (pixels[..., :3].mean(axis=2) < 0.9).mean() > 0.03  # not a blank page
    # What the sections hold: examples per stage and reason, duplicate pairs, the documents cut, the
    # learning rate and throughput beside the loss, the time chart on a log scale.
    assert "<h3>scrape</h3>" in page and "status=404" in page and "near_duplicate_of=" in page
    assert re.search(r"near_duplicate_of=\w+<br>\(kept: <a href=\"http://127\.0\.0\.1:\d+/", page)  # the kept one's URL
    assert "Duplicates beside the documents they repeat" in page and "document cut" in page
    assert "MB written" in page and 'href="file:///' in page
