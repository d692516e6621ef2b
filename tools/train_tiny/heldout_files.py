#!/usr/bin/python3
"""Prints the corpus's held-out files, one path per line, in the order train.py splits them
(every VALIDATION_EVERY-th standard-library file sorted by path): the documents the evaluation
scripts run on, code the repository's models never trained on."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import VALIDATION_EVERY, corpus_files  # noqa: E402

for i, path in enumerate(corpus_files()):
    if i % VALIDATION_EVERY == 0:
        print(path)
