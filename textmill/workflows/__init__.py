"""Luigi tasks: thin wrappers that call textmill.pipeline, textmill.tokenizers and textmill.trainer.

    textmill run run.toml [--workers N]
    luigi --module textmill.workflows EndToEnd --config run.toml --local-scheduler
"""

from textmill.workflows.runner import configure_luigi
from textmill.workflows.tasks import (BlacklistCheck, BlacklistDuplicates, BlacklistShard, CleanShard, Corpus,
                                      Decontaminate, DecontaminateCount, DecontaminateSelect, DecontaminateShard,
                                      DedupBand, DedupBandKeys, DedupClusters, DedupShard, EndToEnd, EvaluateLambada,
                                      ExportHF, MergeDataset, QualityShard, ScrapeShard, Shuffle, ShuffleGather, ShuffleScatter,
                                      SignatureShard, TokenizeShard, TrainGPT, TrainTokenizer)

configure_luigi()

__all__ = ["BlacklistCheck", "BlacklistDuplicates", "BlacklistShard", "CleanShard", "Corpus", "Decontaminate",
           "DecontaminateCount", "DecontaminateSelect", "DecontaminateShard", "DedupBand", "DedupBandKeys",
           "DedupClusters", "DedupShard", "EndToEnd", "EvaluateLambada", "ExportHF", "MergeDataset", "QualityShard", "ScrapeShard",
           "Shuffle", "ShuffleGather", "ShuffleScatter", "SignatureShard", "TokenizeShard", "TrainGPT",
           "TrainTokenizer"]
