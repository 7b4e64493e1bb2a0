"""CARCA's preprocessed Amazon datasets (Rashed et al., RecSys 2022), the data of the PE study 004:
carca_beauty, carca_games, carca_men, carca_fashion.

004 §4.1: "Since multiple versions of these datasets exist, we opted for the preprocessed versions from
(Rashed et al., 2022)". The files (format: pipeline/datasets/carca_files.py) come from one Google Drive
folder linked from CARCA's README (`DRIVE`); it has no direct download, so `seqpe download carca_beauty
--from PATH` takes the folder, or the zip the Drive folder downloads as, or any zip holding the files.

Protocol: leave-one-out exactly as CARCA splits it (its `data_partition`, SASRec's; 004's code copies
it): per user, in file order, n >= 3 interactions give train = items[:-2], valid target items[-2],
test target items[-1]; a user with fewer is kept for training only (CARCA samples users with >= 2 train
items, so a 2-item user gives one train pair; it is never evaluated). No k-core and no renumbering:
the files are already filtered by their authors (one 5-count pass, 004 Table 4's sizes), and their ids
are kept (session_id = user id, item id k = row k - 1 of the attribute matrix), so `n_items` is the
largest item id, as CARCA's `itemnum`. In seqpe's leave-one-out layout: train sessions = items[:-2]
(whole for the short users; augment "shifted"), valid = items[:-1] and test = all items (augment "last",
users with >= 3 only).

Side information (pipeline/side.py): the attribute matrix becomes item_features.parquet, and each
interaction's 6 time features a `context` column aligned with the items. A (user, item) pair that occurs
twice gets its one dict entry both times (the dict cannot tell them apart; the published files are
repeat-free per user).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from ..lazy import lazy
from . import DatasetSpec, SourceSpec, register
from .carca_files import CONTEXT, CarcaFiles, read_context, read_features, read_interactions

pl = lazy("polars")

DRIVE = "https://drive.google.com/drive/folders/1a_u52mIEUA-1WrwsNZZa-aoGJcMmVugs?usp=sharing"
HOMEPAGE = "https://github.com/ahmedrashed-ml/CARCA"
ARCHIVE = "CARCA_Data.zip"          # what the Drive folder is saved as here (any name works with --from)
MIN_PER_USER = 3

# name -> (files, paper size: 004 Table 4)
DATASETS = {
    "carca_beauty": (CarcaFiles("Beauty", "Beauty_feat_cat.dat", "CXTDictSasRec_Beauty.dat", dense=False),
                     "52,204 users, 57,289 items, 394,908 interactions, 6,507 attributes"),
    "carca_games": (CarcaFiles("Video_Games", "Video_Games_feat.dat", "CXTDictSasRec_Games.dat", dense=False),
                    "31,013 users, 23,715 items, 287,107 interactions, 506 attributes"),
    "carca_men": (CarcaFiles("Men", "Men_imgs.dat", "CXTDictSasRec_Men.dat", dense=True),
                  "34,244 users, 110,636 items, 254,870 interactions, 2,048 attributes"),
    "carca_fashion": (CarcaFiles("Fashion", "Fashion_imgs.dat", "CXTDictSasRec_Fashion.dat", dense=True),
                      "45,184 users, 166,270 items, 358,003 interactions, 2,048 attributes"),
}


def reader_for(files: CarcaFiles):
    """(raw_dir) -> LazyFrame user, item, timestamp (the file line: the file keeps each user's time order)."""
    def read(raw_dir: Path) -> pl.LazyFrame:
        df = read_interactions(Path(raw_dir) / files.interactions)
        return df.select("user", "item", timestamp="line").lazy()
    read.__doc__ = f"Read CARCA's {files.interactions} (user item per line, time order per user)."
    return read


def build(spec: DatasetSpec, raw_dir: Path, params):
    """CARCA's split of its own files, with their attributes and context (module docstring)."""
    from ..protocols import ProtocolResult, step
    files: CarcaFiles = DATASETS[spec.name][0]
    raw_dir = Path(raw_dir)
    inter = read_interactions(raw_dir / files.interactions)
    n_items = int(inter.get_column("item").max())
    features = read_features(raw_dir / files.features, n_items)                # (n_items, A)
    context = read_context(raw_dir / files.context)
    width = context.schema["context"].size
    joined = inter.join(context, on=["user", "item"], how="left", maintain_order="left")
    missing = joined.filter(pl.col("context").is_null()).head(1)
    if missing.height:
        r = missing.row(0, named=True)
        u, i, line = r["user"], r["item"], r["line"]
        raise DataError(f"{files.context} has no context for user {u}, item {i} ({files.interactions} line {line})",
                        "the two files must belong to the same dataset; download them again")
    seqs = (joined.group_by("user", maintain_order=True)
            .agg(items=pl.col("item").cast(pl.Int32), context=pl.col("context"))
            .sort("user").rename({"user": "session_id"}))
    n = pl.col("items").list.len()
    full = n >= MIN_PER_USER

    def head(k: int) -> list:
        return [pl.col(c).list.head(n - k) for c in ("items", "context")]
    splits = {
        "train": seqs.with_columns([pl.when(full).then(e).otherwise(pl.col(c)).alias(c)
                                    for e, c in zip(head(2), ("items", "context"))]),
        "valid": seqs.filter(full).with_columns(head(1)),
        "test": seqs.filter(full),
    }
    counts = inter.group_by("item").len("count")
    items = (pl.DataFrame({"item_id": pl.int_range(1, n_items + 1, dtype=pl.Int32, eager=True)})
             .join(counts.select(pl.col("item").cast(pl.Int32).alias("item_id"), "count"), on="item_id", how="left",
                   maintain_order="left")
             .select("item_id", raw_id=pl.col("item_id").cast(pl.String),
                     count=pl.col("count").fill_null(0).cast(pl.Int64)))
    short = seqs.filter(~full)
    steps = [step(f"read {files.interactions}", seqs.height, inter.height, inter.get_column("item").n_unique()),
             step("users with >= 3 interactions (valid and test)", splits["test"].height,
                  int(splits["test"].select(n.sum()).item() or 0), None),
             step("users with < 3 interactions (train only)", short.height,
                  int(short.select(n.sum()).item() or 0), None)]
    names = CONTEXT if width == len(CONTEXT) else tuple(f"context_{j}" for j in range(width))
    return ProtocolResult(
        splits=splits, items=items, steps=steps, n_items=n_items,
        augment={"train": "shifted", "valid": "last", "test": "last"},
        extra={"users": seqs.height, "split": "CARCA's data_partition: per user with n >= 3, train = [:-2], "
               "valid = [-2], test = [-1]; users with n < 3 train only",
               "ids": "as in the files (session_id = user id; item k = attribute row k - 1)", "k_core": None,
               "attributes": int(features.shape[1]), "context": list(names),
               "files": list(files.files)},
        side={"item_features": pl.DataFrame({"item_id": pl.int_range(1, n_items + 1, dtype=pl.Int32, eager=True),
                                             "features": pl.Series(features)}),
              "context": names},
    )


for _name, (_files, _size) in DATASETS.items():
    register(DatasetSpec(
        name=_name,
        source=SourceSpec(name=_name, filename=ARCHIVE, archive="zip", files=_files.files, url=None,
                          homepage=HOMEPAGE,
                          manual=(f"download CARCA's preprocessed data folder {DRIVE} (linked from {HOMEPAGE}), "
                                  f"then run `seqpe download {_name} --from` that folder or the zip it downloads as")),
        protocol="leave_one_out",
        description=f"CARCA's preprocessed Amazon {_files.name.replace('_', ' ')} with item attributes and time "
                    "context (004's data), CARCA's leave-one-out split",
        reader=reader_for(_files),
        options={"files": list(_files.files)},
        paper_size=_size,
        build=build,
    ))
