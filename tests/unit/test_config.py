"""The run's TOML file: a bad value is one error naming the field."""

import pytest

from textmill.errors import TextmillError
from textmill.run_file import load_config


@pytest.mark.parametrize("text, error", [
    ('[train]\nresume = "sometimes"', "[train] resume must be one of fresh, latest, not 'sometimes'"),
    ('[train]\nresume = "latest"', '[train] resume = "latest" needs [tokenize] vocab_file'),
    ('[run]\ncorpus_form = "parts"', '[run] corpus_form = "parts" needs [tokenize] vocab_file'),
    ('[run]\ncorpus_form = "daily"', "[run] corpus_form must be one of single, parts, not 'daily'"),
    ('[schedule]\nat = "3am"', "[schedule] at: '3am' is not a time of day HH:MM"),
    ('[schedule]\nat = "12:5"', "[schedule] at: '12:5' is not a time of day HH:MM"),
    ("[run]\nresults_runs = 0", "[run] results_runs must be at least 1"),
    ("[train]\nsave = \"x\"", "[train] save: the workflow sets it itself"),
    ("[train]\nno_such_option = 1", "[train] has no field 'no_such_option' (textmill run --example-config lists them)"),
    ("[dedup]\nshingle_unit = \"line\"", "[dedup] shingle_unit must be one of word, char, not 'line'"),
    ("[shuffle]\nseed = 3", "[shuffle] seed: the shuffle's seed is [run] seed"),
    # Ranges, checked when the file is read rather than when the stage runs.
    ("[scrape]\nconcurrency = 0", "[scrape] concurrency must be at least 1, not 0"),
    ("[scrape]\ntimeout_s = nan", "[scrape] timeout_s must be more than 0, not nan"),
    ("[scrape]\nallow_networks = [\"mirror\"]", "[scrape] allow_networks: 'mirror' is not an address or network"),
    ("[run]\nseed = -5", "[run] seed must be at least 0, not -5"),
    ("[dedup]\nbands = 0", "[dedup] bands must be at least 1, not 0"),
    ("[decontaminate]\nmin_ngram = 20", "[decontaminate] min_ngram 20 is more than max_ngram 13"),
    ("[shuffle]\nnum_shards = -1", "[shuffle] num_shards must be at least 0, not -1"),
    ("[shuffle]\ntarget_shard_mb = 0", "[shuffle] target_shard_mb must be more than 0"),
    ("[train]\nnproc_per_node = 0", "[train] nproc_per_node must be at least 1, not 0"),
    # The trainer's own checks, with the model the options describe.
    ("[train]\nlr = 0.1", "[train] needs train_iters"),
    ("[train]\ntrain_iters = 5\nhidden_dropout = 2.0", "[train] hidden_dropout must be at most 1, not 2.0"),
    ("[train]\ntrain_iters = 5\nseq_length = 1024", "[train] --seq-length 1024 is longer than --max-position-embeddings 256"),
    ("[train]\ntrain_iters = 5\nmicro_batch_size = 8\nglobal_batch_size = 16\nnproc_per_node = 3",
     "[train] --global-batch-size 16 is not divisible by --micro-batch-size 8 x data-parallel size 3"),
])
def test_a_bad_value_is_one_error_naming_the_field(tmp_path, text, error):
    (tmp_path / "run.toml").write_text(text + "\n")
    with pytest.raises(TextmillError) as raised:
        load_config(tmp_path / "run.toml")
    assert error in str(raised.value)
