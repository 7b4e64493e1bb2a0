"""The train stage: samples -> one run folder per (model, encoding[, tag], seed).

    setup.py   what one run is: model and encoding (command line or the study grid), the resolved
               TrainParams (params.yaml < preset < --set), the device, the encoding object
    tasks.py   next-item (full-ranking metrics) and CTR (AUC, gAUC, logloss) behind one interface
    loop.py    epochs, selection on valid, early stopping, time limit, resume: task-agnostic
    runs.py    run folders, the per-configuration DVC metrics file and dvclive curves, and the state
               kept outside DVC outputs (resume files, finished seeds)
    stage.py   `seqpe train`: every seed of one configuration

Model selection uses `valid` only: the best epoch's weights on `train.select_metric` are kept and
`test` is scored ONCE, with them. torch and the models are imported inside the functions that need
them, so `seqpe --help` and the data commands stay torch-free.
"""
from __future__ import annotations

from .runs import fingerprint, save_run
from .setup import build_encoding, check_tag, pick_device, resolve_run, resolve_train
from .stage import run, samples_manifest, train_one
from .tasks import loss_fn, score

__all__ = ["build_encoding", "check_tag", "fingerprint", "loss_fn", "pick_device", "resolve_run",
           "resolve_train", "run", "samples_manifest", "save_run", "score", "train_one"]
