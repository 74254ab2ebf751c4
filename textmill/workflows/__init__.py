"""Luigi tasks: thin wrappers that call textmill.pipeline, textmill.tokenizers and textmill.trainer. This
module names every task of a run's graph, for Luigi's own command:

    textmill run run.toml [--workers N]
    luigi --module textmill.workflows EndToEnd --config run.toml --local-scheduler
"""

from textmill.workflows.corpus_tasks import (
                                             BlacklistCheck,
                                             BlacklistDuplicates,
                                             BlacklistShard,
                                             CleanShard,
                                             DedupBand,
                                             DedupBandKeys,
                                             DedupClusters,
                                             DedupShard,
                                             ExtractShard,
                                             QualityShard,
                                             ScrapeShard,
                                             SignatureShard,
)
from textmill.workflows.ablation import AblationTargets
from textmill.workflows.classify_tasks import ClassifyShard, TrainClassifier
from textmill.workflows.model_tasks import EndToEnd, EvaluateHeldOut, EvaluateLambada, ExportHF, TrainGPT
from textmill.workflows.runner import configure_luigi
from textmill.workflows.shuffle_tasks import (
                                             Decontaminate,
                                             DecontaminateCount,
                                             DecontaminateSelect,
                                             DecontaminateShard,
                                             Shuffle,
                                             ShuffleGather,
                                             ShufflePlan,
                                             ShuffleScatter,
)
from textmill.workflows.token_tasks import Corpus, GivenTokenizer, ImportHF, MergeDataset, TokenizeShard, TrainTokenizer

configure_luigi()

__all__ = ["AblationTargets", "BlacklistCheck", "BlacklistDuplicates", "BlacklistShard", "ClassifyShard", "CleanShard",
           "Corpus",
           "Decontaminate", "DecontaminateCount", "DecontaminateSelect", "DecontaminateShard", "DedupBand",
           "DedupBandKeys", "DedupClusters", "DedupShard", "EndToEnd", "EvaluateHeldOut", "EvaluateLambada",
           "ExportHF", "ExtractShard", "GivenTokenizer", "ImportHF", "MergeDataset", "QualityShard", "ScrapeShard",
           "Shuffle", "ShuffleGather", "ShufflePlan", "ShuffleScatter", "SignatureShard", "TokenizeShard",
           "TrainClassifier", "TrainGPT", "TrainTokenizer"]
