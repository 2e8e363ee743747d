"""The main job: train a small SDM language model on multi-query associative recall.

Run ``python -m sdm.demo --help`` (or ``make demo``)."""
