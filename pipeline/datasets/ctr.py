"""reczoo/BARS CTR benchmarks: KuaiVideo_x1 (`kuaivideo`) and AmazonElectronics_x1
(`amazon_electronics`), CTR protocol (REFERENCE.md §4).

Each zip from the reczoo dataset hub holds `train.csv` and `test.csv` (md5 published in the
reczoo/Datasets READMEs, checked as `SourceSpec.file_md5`). Columns, as written by reczoo's
convert scripts and read by the BARS dataset configs (FuxiCTR feature_cols):

    AmazonElectronics_x1  label,user_id,item_id,cate_id,item_history,cate_history
                          (label_col label; sequences item_history / cate_history, splitter "^",
                          max_len 100; DIN's Amazon Electronics pickle converted)
    KuaiVideo_x1          timestamp,user_id,item_id,is_click,is_like,is_follow,pos_items,neg_items
                          (label_col is_click; sequences pos_items / neg_items, splitter "^",
                          max_len 100; rows sorted by timestamp; no item categories)

The reader checks each header and returns the CTR protocol's input schema (see
`pipeline.protocols.ctr`): split, row, label, user, item, [cate], [timestamp], hist_*.
is_like / is_follow are not used (the BARS configs do not use them either).

`OPTIONS` holds each dataset's BARS DIN config (reczoo/BARS ranking/ctr/DIN/DIN_<dataset>_x1 tuner
configs) as seqpe applies it in the augment stage (`pipeline.ctr_vocab`):

    AmazonElectronics_x1  min_categr_count 1; user_id is a meta column (the gAUC group, not
                          embedded); item_id and cate_id categorical; item_history / cate_history
                          sequences sharing the item / cate tables (target field (item_id, cate_id),
                          sequence field (item_history, cate_history))
    KuaiVideo_x1          min_categr_count 10; user_id and item_id categorical (group_id = a copy of
                          the raw user_id); pos_items (the behaviour sequence) and neg_items (an extra
                          sequence, mean-pooled) share the item table. The config's frozen visual
                          item embeddings (item_emb, pos_items_emb, neg_items_emb from
                          item_visual_emb_dim64.h5) are NOT in seqpe's scope: items are ids only.
"""
from __future__ import annotations

from pathlib import Path

from .. import sniff
from ..errors import DataError, printable
from ..lazy import lazy
from . import DatasetSpec, SourceSpec, register

pl = lazy("polars")  # imported on first use: `seqpe download` never needs it

HUB = "https://huggingface.co/datasets/reczoo"
BARS_FILES = ("train.csv", "test.csv")

# dataset -> raw column -> (protocol column or None to drop, Polars dtype name)
COLUMNS = {
    "amazon_electronics": {
        "label": ("label", "Int64"), "user_id": ("user", "Int64"), "item_id": ("item", "Int64"),
        "cate_id": ("cate", "Int64"), "item_history": ("hist_items", "String"),
        "cate_history": ("hist_cates", "String"),
    },
    "kuaivideo": {
        "timestamp": ("timestamp", "Int64"), "user_id": ("user", "Int64"), "item_id": ("item", "Int64"),
        "is_click": ("label", "Int64"), "is_like": (None, "Int64"), "is_follow": (None, "Int64"),
        "pos_items": ("hist_items", "String"), "neg_items": ("hist_neg_items", "String"),
    },
}


# dataset -> protocol options: the valid rule (pipeline.protocols.ctr) and the sample layout
# (pipeline.ctr_vocab): fields of the target / history in order, the sessions column of each,
# other item-table sequences, other categorical features (own tables), the gAUC group column
OPTIONS = {
    "amazon_electronics": {
        "valid": "last_per_user",
        "ctr": {"min_count": 1, "fields": ["item", "cate"], "target": {"item": "item", "cate": "cate"},
                "history": {"item": "hist_items", "cate": "hist_cates"}, "extra": {}, "features": [],
                "group": "user", "label": "label"},
    },
    "kuaivideo": {
        "valid": "tail",
        "ctr": {"min_count": 10, "fields": ["item"], "target": {"item": "item"},
                "history": {"item": "hist_items"}, "extra": {"neg_items": "hist_neg_items"},
                "features": ["user"], "group": "user", "label": "label"},
    },
}


def find_bars_file(raw_dir: Path, name: str) -> Path:
    """`raw_dir/name`, or the one `name` one folder below (the zip may hold a folder)."""
    raw_dir = Path(raw_dir)
    if (raw_dir / name).is_file():
        return raw_dir / name
    found = sorted(raw_dir.glob(f"*/{name}")) if raw_dir.is_dir() else []
    if len(found) != 1:
        where = "not found" if not found else f"found {len(found)} times"
        raise DataError(f"{name} {where} in {raw_dir}", "run `seqpe download DATASET` to fetch and unpack the BARS zip")
    return found[0]


def header(path: Path, own: bool = False) -> list[str]:
    """`path`'s column names, after checking it is text with a header line. `own`: a user's file
    (`seqpe import`), whose fixes say to repair or unpack it rather than download it again."""
    if own:
        def unpack(kind: str) -> str:
            return (f"unpack it first (`mv {path} {path}.gz && gunzip {path}.gz`), then import the folder"
                    if kind == "gz" else f"unpack it first (a {kind} archive), then import the folder")
        empty = "write the header line and the rows into it, or pass the folder that holds your files"
        sniff.require_text(path, empty, archive_fix=unpack,
                           fix="save it as UTF-8 CSV text with a header line, then import the folder")
    else:
        sniff.require_text(path)
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    if not first:
        raise DataError(f"{path} is empty", empty if own else "re-download the dataset")
    names = first.split(",")
    spaced = [c for c in names if c != c.strip()]
    if spaced:     # `label, user_id, ...` (a spreadsheet's or pandas' sep=", "): Polars reads the names with the spaces
        raise DataError(f"{path.name}'s header has spaces around its column names ({printable(repr(spaced[0]), 40)})",
                        f"write the header and the rows with bare commas: {','.join(c.strip() for c in names)}")
    return names


def scan_bars(path: Path, columns: dict, split: str) -> pl.LazyFrame:
    """Lazy scan of one BARS CSV after checking its header has exactly the expected columns."""
    cols = header(path)
    missing = [c for c in columns if c not in cols]
    extra = [c for c in cols if c not in columns]
    if missing or extra or len(cols) != len(columns):
        what = "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                     f"unexpected {', '.join(extra)}" if extra else "") if x) or "duplicated columns"
        raise DataError(f"{path.name} has the wrong column set ({printable(what, 160)})",
                        f"expected the BARS columns {','.join(columns)}; re-download the dataset")
    schema = {c: getattr(pl, columns[c][1]) for c in cols}
    keep = [pl.col(c).alias(columns[c][0]) for c in cols if columns[c][0] is not None]
    return (pl.scan_csv(path, schema=schema, has_header=True, quote_char='"', row_index_name="row", glob=False)
              .select(pl.lit(split).alias("split"), "row", *keep))


def reader_for(name: str):
    columns = COLUMNS[name]

    def read(raw_dir: Path) -> pl.LazyFrame:
        return pl.concat([scan_bars(find_bars_file(raw_dir, f), columns, f.removesuffix(".csv"))
                          for f in BARS_FILES], how="vertical")
    read.__doc__ = f"Scan the BARS train.csv and test.csv of {name} (header checked)."
    read.columns = {protocol: raw for raw, (protocol, _) in columns.items() if protocol is not None}  # for messages
    return read


register(DatasetSpec(
    name="amazon_electronics",
    source=SourceSpec(
        name="amazon_electronics_x1", filename="AmazonElectronics_x1.zip", archive="zip", files=BARS_FILES,
        url=f"{HUB}/AmazonElectronics_x1/resolve/main/AmazonElectronics_x1.zip",
        homepage="https://github.com/reczoo/Datasets/tree/main/Amazon/AmazonElectronics_x1",
        file_md5={"train.csv": "e9bf80b92985e463db18fdc753d347b5", "test.csv": "57a20e82fe736dd495f2eaf0669bf6d0"}),
    protocol="ctr",
    description="BARS AmazonElectronics_x1 (DIN's Amazon Electronics), CTR with item/category histories",
    reader=reader_for("amazon_electronics"),
    options=OPTIONS["amazon_electronics"],
    paper_size="2,608,764 train + 384,806 test samples, 63,001 items, 801 categories",
))

register(DatasetSpec(
    name="kuaivideo",
    source=SourceSpec(
        name="kuaivideo_x1", filename="KuaiVideo_x1.zip", archive="zip", files=BARS_FILES,
        url=f"{HUB}/KuaiVideo_x1/resolve/main/KuaiVideo_x1.zip",
        homepage="https://github.com/reczoo/Datasets/tree/main/KuaiShou/KuaiVideo_x1",
        file_md5={"train.csv": "16f13734411532cc313caf2180bfcd56", "test.csv": "ba26c01caaf6c65c272af11aa451fc7a"}),
    protocol="ctr",
    description="BARS KuaiVideo_x1 (Kuaishou micro-video clicks), CTR with clicked/unclicked histories",
    reader=reader_for("kuaivideo"),
    options=OPTIONS["kuaivideo"],
    paper_size="10,931,092 train + 2,730,291 test samples, 10,000 users",
))
