"""The one-line summaries each command and `textmill run` end with."""

from __future__ import annotations

from pathlib import Path

from textmill.io.store import shown
from textmill.pipeline.shards import summarize
from textmill.report.record import RunRecord, StageCounts


def stage_summary(stage: str, manifests: list[dict], output: Path, seconds: float,
                  tasks: dict[str, int] | None = None) -> StageCounts:
    """The counts of one stage over its shards' manifests, its tasks (made, taken from an earlier output, done by an
    earlier run), and its throughput over `seconds` (the time its tasks ran, added up: per worker): records in per
    second, and MB per second of the kept shards it wrote (zstd Parquet)."""
    total = summarize(manifests)
    c = total["counts"]
    written = sum(m.get("bytes") or kept_bytes(Path(output) / m["output"]) for m in manifests)
    return StageCounts(stage=stage, shards=total["shards"], input=c.get("input", 0), kept=c.get("kept", 0),
                       rejected=c.get("rejected", 0), rows_out=c.get("output_rows", c.get("kept", 0)),
                       reasons=total["reasons"], output=shown(Path(output)), seconds=seconds, bytes=written,
                       records_per_s=round(c.get("input", 0) / seconds) if seconds > 0 else None,
                       mb_per_s=round(written / 2**20 / seconds, 3) if seconds > 0 else None, tasks=tasks)


def kept_bytes(shard: Path) -> int:
    """The size of a kept shard whose manifest does not say it (one written before textmill recorded it)."""
    return shard.stat().st_size if shard.exists() else 0


SHOWN_REASONS = 8  # in a summary line; the rest are counted, and listed by `textmill inspect`


def reasons_text(reasons: dict[str, int]) -> str:
    """The reasons that rejected most, largest first, and how many more there were."""
    ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v}" for k, v in ranked[:SHOWN_REASONS])
    rest = ranked[SHOWN_REASONS:]
    if rest:
        text += f", and {len(rest)} more reason(s) rejecting {sum(v for _, v in rest)}"
    return text or "none"


def stage_line(s: StageCounts) -> str:
    reasons = reasons_text(s.reasons)
    extra = f", {s.rows_out} rows out" if s.rows_out != s.kept else ""
    return (f"{s.stage}: {s.shards} shard(s), {s.input} in, {s.kept} kept, {s.rejected} rejected "
            f"({reasons}){extra} -> {s.output} [{s.seconds:.1f}s{'; ' + tasks_text(s.tasks) if s.tasks else ''}]")


def tasks_text(tasks: dict[str, int] | None) -> str:
    """What a stage's tasks cost this run: those it made, those it took from an earlier task's output made from the
    same input bytes, and those an earlier run had done."""
    if not tasks:
        return ""
    return (f"tasks: {tasks['made']} made, {tasks['taken']} taken from earlier output, {tasks['earlier']} done "
            "before this run")


# What to do when one reason rejects most of what a stage read, by the reason's name (before any "=").
REMEDIES = {
    "blocked_address": "the URLs point at private, loopback or link-local addresses, which scrape refuses unless "
                       "told: --allow-private-addresses ([scrape] allow_private_addresses = true) for a local mirror, "
                       "or --allow-networks CIDR for one network",
    "timeout": "the hosts answered too slowly or not at all: check the network, or raise --timeout-s",
    "connection_error": "the hosts could not be reached: check the network and the URLs",
    "status": "the sites answered with an error: check the URLs (a 403 or 429 may be a site refusing crawlers: "
              "--user-agent, --per-host-concurrency)",
    "robots_disallowed": "the sites' robots.txt disallow --user-agent; without --robots-txt the pages are fetched",
    "empty_extraction": "the pages gave no main text: try the other extractor (--extractor newspaper or trafilatura)",
    "extraction_timeout": "pages needed more CPU time than --extract-timeout-s to extract: raise it to keep them",
    "host_down": "hosts that did not accept connections were given up on: check the network, or raise "
                 "--connect-timeout-s or --host-give-up (0 tries every URL)",
    "duplicate": "the URL lists repeat most of their URLs",
    "near_duplicate_of": "most documents repeat others: the URL lists may hold mirrors of one site",
    "exact_duplicate_of": "most documents repeat others word for word: the URL lists may hold mirrors of one site",
    "language": "most documents are in another language: --language CODE ([clean] language) keeps that one",
    "language_undetectable": "the documents hold too little text to tell their language",
    "too_short": "most documents are shorter than --min-tokens ([clean] min_tokens)",
    "few_stop_words": "Gopher's stop words are English: are the documents in English?",
}


# Reasons worth a warning long before they reject half of what a stage read: they lose pages a run meant to keep.
WARN_FROM = {"extraction_timeout": 0.02, "host_down": 0.05}


def reject_warning(s: StageCounts) -> str | None:
    """A warning when one reason rejected more than half of what a stage read (or its share in WARN_FROM), with
    what to do about it."""
    if not s.input or not s.reasons:
        return None
    over = [(count, reason) for reason, count in s.reasons.items()
            if count > WARN_FROM.get(reason.partition("=")[0], 0.5) * s.input]
    if not over:
        return None
    count, reason = max(over)
    remedy = REMEDIES.get(reason.partition("=")[0])
    return (f"warning: {s.stage} rejected {count} of {s.input} ({count / s.input:.0%}) as {reason}"
            + (f": {remedy}" if remedy else ""))


def nothing_kept(s: StageCounts) -> str:
    """The error of a stage command that kept nothing."""
    if not s.input:
        return f"{s.stage} read no records: its input holds none (an empty list or folder?)"
    return (f"{s.stage} kept none of the {s.input:,} records it read ({reasons_text(s.reasons)}); the rejects and "
            f"their reasons: textmill inspect {s.output}")


def no_responses(others: dict[str, int]) -> str:
    """The error of `textmill warc` on archives that hold records but no response (a page): what they hold."""
    held = ", ".join(f"{kind} {count:,}" for kind, count in sorted(others.items())) or "no records"
    hint = ("; a WET file holds the text Common Crawl extracted (conversion records), a WAT file its metadata "
            "(metadata records): read the WARC files they were made from") if {"conversion", "metadata"} & set(others) else ""
    return f"warc read no response records (pages): its archives hold {held}{hint}"


def dedup_line(clusters: dict) -> str:
    sizes = clusters["cluster_sizes"]
    return (f"  {len(sizes)} duplicate cluster(s), largest {sizes[0] if sizes else 0}; {clusters['exact_duplicates']} "
            f"exact duplicate(s) (same words); {clusters['candidate_pairs']} MinHash candidate pairs, "
            f"{clusters['confirmed_pairs']} confirmed")


def classifier_line(info: dict) -> str:
    """What the classifier is (trained in the run, with its held-out figures; or the model given) and how the
    documents scored, in tenths from 0 to 1."""
    if "model" in info:
        made = f"fastText model {info['model']} ({info['labels']} labels), score = P({info['label']})"
    else:
        made = (f"trained on {info['trained_positives']:,} positives and {info['trained_negatives']:,} negatives; held "
                f"out {info['held_out_positives']:,} + {info['held_out_negatives']:,}: AUC {info['auc']:.3f}, its rule "
                f"keeps {info['held_out_kept_fraction']:.1%} at precision {info['precision_at_kept_fraction']:.3f}")
    return f"  classifier: {made}; documents by score in tenths: {' '.join(map(str, info['score_histogram']))}"


def decontaminate_line(info: dict, key_threshold: int) -> str:
    return (f"  {info['eval_ngrams']} evaluation n-grams, {info['seen_in_training']} seen in training, {info['used']} used "
            f"(all but those found in {key_threshold} or more documents); {info['documents_touched']} document(s) touched, "
            f"{info['characters_removed']} characters removed")


def quality_line(manifests: list[dict]) -> str:
    """What C4's line rules did: documents kept with fewer lines, and the lines dropped per rule."""
    dropped: dict[str, int] = {}
    for m in manifests:
        for rule, n in m.get("lines_dropped", {}).items():
            dropped[rule] = dropped.get(rule, 0) + n
    rules = ", ".join(f"{k} {v}" for k, v in sorted(dropped.items(), key=lambda kv: -kv[1])) or "none"
    return f"  line rules: {sum(m.get('shortened', 0) for m in manifests)} kept document(s) shortened; lines dropped: {rules}"


def seconds_tag(seconds: float) -> str:
    """How commands end their summaries: the wall time in brackets."""
    return f"[{seconds:.1f}s]"


def tokenize_line(m: dict, datasets: list[str], rejects: Path, seconds: float) -> str:
    """`textmill tokenize`'s summary from its manifest; `datasets` are the PREFIX_KEY_document prefixes."""
    c = m["counts"]
    reasons = ", ".join(f"{k} {v}" for k, v in m["reasons"].items()) or "none"
    where = f"; first: {m['first_rejects'][0]} (all in {rejects})" if c["rejected"] else ""
    tokens = ", ".join(f"{d}.bin/.idx {n:,} tokens" for d, n in zip(datasets, c["tokens"].values(), strict=True))
    return (f"tokenize: {len(m['inputs'])} file(s), {c['input']} documents in, {c['kept']} written, "
            f"{c['rejected']} rejected ({reasons}{where})\n  {tokens} ({m['params']['dtype']}), "
            f"{m['mb_per_s']} MB/s {seconds_tag(seconds)}")


def trained_tokenizer_line(tokenizer) -> str:
    return f"train-tokenizer: {tokenizer.vocab_size}-token byte-level BPE -> {tokenizer.files[0]}, {tokenizer.files[1]}"


def merged_line(documents: int, tokens: int, parts: int, output_prefix, seconds: float) -> str:
    return (f"merge-datasets: {parts} dataset(s), {documents:,} documents, {tokens:,} tokens -> {output_prefix}.bin/.idx "
            f"{seconds_tag(seconds)}")


def train_line(result: dict, save: Path | None, seconds: float) -> str:
    where = f"; checkpoint {save}/iter_{result['saved_at']:07d}" if result["saved_at"] else ""
    valid = f", validation loss {result['valid_loss']:.4f}" if result["valid_loss"] is not None else ""
    return (f"train: {result['iterations']} iterations{valid}, {result['skipped_iterations']} skipped{where} "
            f"{seconds_tag(seconds)}")


def lambada_lines(r: dict, seconds: float) -> list[str]:
    """Megatron's closing line of a LAMBADA evaluation, then textmill's."""
    truncated = f", {r['truncated']} passage(s) cut to the model's positions" if r["truncated"] else ""
    return [f"number correct: {r['correct']} | total examples: {r['total']} | avg accuracy: {r['accuracy']:.4E}",
            f"evaluate lambada{' (strict)' if r['strict'] else ''}: iteration {r['iteration']}, accuracy "
            f"{r['accuracy']:.2%} ({r['correct']}/{r['total']}), last-word perplexity {r['perplexity']:.2f}{truncated} "
            f"-> {r['output']} {seconds_tag(seconds)}"]


def export_line(r: dict, seconds: float) -> str:
    return (f"export hf: {r['family']} model, {r['parameters']:,} parameters, vocabulary {r['vocab_size']}, "
            f"iteration {r['iteration']} -> {r['output']} {seconds_tag(seconds)}")


def export_corpus_line(r: dict, seconds: float) -> str:
    if r["linked"] == r["shards"]:
        how = "hard links to the run's shards: the same files, so editing one edits both; deleting WORK keeps them"
    elif r["linked"]:
        how = f"{r['linked']} hard link(s) to the run's shards (the same files), {r['shards'] - r['linked']} copied"
    else:
        how = "copies (WORK is on another disk)"
    return (f"export corpus: the {r['stage']} stage, {r['shards']} shard(s), {r['documents']:,} documents -> "
            f"{r['output']}, as {how} {seconds_tag(seconds)}")


def import_line(r: dict, seconds: float) -> str:
    return (f"import hf: {r['family']} model, {r['parameters']:,} parameters, vocabulary {r['vocab_size']} padded to "
            f"{r['padded_vocab_size']} -> {r['output']}/release {seconds_tag(seconds)}")


def export_megatron_line(r: dict, seconds: float) -> str:
    layout = ("torch_dist (whole: any tensor x pipeline layout loads it)" if r["format"] == "torch_dist" else
              f"{r['tp']} x {r['pp']} shards (tensor x pipeline)")
    return (f"export megatron: {r['parameters']:,} parameters, {layout}, "
            f"{'legacy' if r['names'] == 'legacy' else 'Megatron-core'} names, "
            f"vocabulary {r['vocab_size']} padded to {r['padded_vocab_size']}, checkpoint {r['iteration']} -> "
            f"{r['output']} {seconds_tag(seconds)}")


def import_megatron_line(r: dict, seconds: float) -> str:
    layout = f"{r['tensor_parallel']} x {r['pipeline_parallel']} shards"
    if r["format"] == "torch_dist":  # stored whole: the layout is the one that saved it, when its args say
        layout = "torch_dist" + (f" (saved by {layout.removesuffix(' shards')})" if r["tensor_parallel"] else "")
    return (f"import megatron: GPT-2 model, {r['parameters']:,} parameters, checkpoint version {r['checkpoint_version']:g}, "
            f"{layout}{'' if r['args'] else ', no args (shape from the tensors)'}, vocabulary {r['vocab_size']} padded "
            f"to {r['padded_vocab_size']} -> {r['output']}/release {seconds_tag(seconds)}")


def convert_line(r: dict) -> str:
    return (f"checkpoint convert: {r['parameters']:,} parameters from {r['from']} -> {r['to']} (tensor parallel "
            f"{r['tp']}, pipeline parallel {r['pp']}, {r['format']}; weights only) {seconds_tag(r['seconds'])}")


def failed_run_lines(record: RunRecord, folder: Path) -> list[str]:
    """The end of a failed `textmill run`; the last line names what failed and why."""
    failed = record.failed or ["no task failed here, but the graph is not finished (see the summary above)"]
    more = f" (and {len(failed) - 1} more: textmill status)" if len(failed) > 1 else ""
    return [f"textmill run: failed after {record.seconds:.1f}s (recorded in {shown(folder)}); `textmill run` again redoes "
            "only what is not finished", f"textmill run: failed: {failed[0]}{more}"]


def serve_banner(info: dict, host: str, port: int) -> str:
    return (f"serve: {info['checkpoint']} (iteration {info['iteration']}, {info['parameters']:,} parameters) on "
            f"http://{host}:{port}  PUT /api, POST /v1/completions, GET /health; Ctrl-C stops")


def served_line(stats: dict, seconds: float) -> str:
    turned = "".join(f", {stats[key]} {what}" for key, what in (("busy", "refused as busy (503)"),
                                                                ("abandoned", "abandoned by their client")) if stats[key])
    return (f"serve: stopped after {stats['requests']} request(s), {stats['errors']} answered with an error{turned} "
            f"{seconds_tag(seconds)}")


# A stage's second line in a run's funnel, from its own part of the run record (workflows/stages.py).
STAGE_LINES = {"dedup": lambda record: dedup_line(record.dedup),
               "classify": lambda record: classifier_line(record.classifier),
               "decontaminate": lambda record: decontaminate_line(record.decontaminate,
                                                                  record.decontaminate["key_threshold"])}


def funnel_lines(record: RunRecord) -> list[str]:
    """The corpus stages of a run record, one line each (a stage with a line of its own, STAGE_LINES, a second;
    a stage that rejected most of its input with a warning), then the token count."""
    lines = []
    for s in record.funnel:
        lines.append(stage_line(s))
        warning = reject_warning(s)
        if warning:
            lines.append("  " + warning)
        if s.stage in STAGE_LINES:
            lines.append(STAGE_LINES[s.stage](record))
    corpus = record.corpus
    if corpus:
        tasks = tasks_text(corpus.tasks)
        lines.append(f"tokenize: {corpus.documents:,} documents, {corpus.tokens:,} tokens -> {token_files(corpus)}"
                     + (f" [{tasks}]" if tasks else ""))
    return lines


def token_files(corpus) -> str:
    """Where a run's token files are: the merged PREFIX.bin/.idx, or the parts form's folder of blended shards."""
    if corpus.parts:
        return f"{corpus.dataset} ({corpus.parts} part(s), each shard's token files blended by its tokens)"
    return f"{corpus.dataset}.bin/.idx"
