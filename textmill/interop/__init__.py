"""Models in and out of other formats: Hugging Face folders both ways (`hf`) and checkpoints rewritten for
a tensor/pipeline-parallel layout (`convert`)."""
