"""seqpe data pipeline: download, preprocess, augment, train, evaluate."""
