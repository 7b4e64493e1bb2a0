"""pipeline/tables.py and the CLI's tables at 80 columns (a CI log, a pipe): names never cut, no
value ending in "…", no line wider than the console; --json for scripts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from pipeline import report
from pipeline.tables import Col, print_tables, split_columns

ROOT = Path(__file__).resolve().parents[1]
KEYS = [f"{m}@{k}" for m in ("hr", "mrr", "ndcg") for k in (5, 10, 20)]


def render(fn, width: int = 80) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    fn(console)
    return console.export_text()


def rows(datasets=("sample",)) -> list[dict]:
    stat = {"mean": 0.3456, "std": 0.0123, "ci95": 0.0234, "n": 3}
    return [{"dataset": d, "protocol": "srgnn", "model": m, "encoding": e, "tag": None, "name": f"{m}-{e}",
             "seeds": [1, 2, 3], "best_epochs": [1, 2, 3], "metrics": {k: stat for k in KEYS}}
            for d in datasets for m, e in (("sasrec", "rotatory_con"), ("pop", "none"))]


def test_report_at_80_columns_keeps_every_name_and_value():
    text = render(lambda c: report.print_tables(c, rows()))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert text.count("sasrec-rotatory_con") == 3 and text.count("34.56 ± 2.34") == 18
    # the metric families stay together: hr@*, mrr@*, ndcg@* each in one table
    tables = text.split("test metrics over seeds")[1:]
    assert [sorted({k for k in KEYS if f" {k} " in t}) for t in tables] == [
        sorted(KEYS[:3]), sorted(KEYS[3:6]), sorted(KEYS[6:])]
    wide = render(lambda c: report.print_tables(c, rows(("sample", "diginetica"))), width=250)
    assert "(1/" not in wide and "diginetica" in wide          # wide enough: one table, dataset as a column


def test_split_packs_value_columns_and_repeats_keys():
    cols = [Col("name", key=True)] + [Col(f"c{i}") for i in range(6)]
    cells = [["a-rather-long-name"] + ["1234567890"] * 6]
    blocks = split_columns(cols, cells, 60)
    assert all(b[0] == 0 for b in blocks) and sorted(i for b in blocks for i in b[1:]) == list(range(1, 7))
    assert all(18 + 1 + 3 + sum(10 + 3 for _ in b[1:]) <= 60 for b in blocks)
    text = render(lambda c: print_tables(c, "t", cols, cells), width=60)
    assert max(map(len, text.splitlines())) <= 60 and text.count("a-rather-long-name") == len(blocks)


def cli(*args: str, columns: str = "80") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS=columns))


def test_datasets_table_at_80_columns_and_piped(tmp_path):
    proc = cli("datasets", "--data-dir", str(tmp_path))             # stdout is a pipe here
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in proc.stdout
    for name in ("yoochoose", "yoochoose_1_4", "yoochoose_1_64", "amazon_electronics", "kuaivideo"):
        assert any(f"│ {name} " in line for line in lines), name
    data = json.loads(cli("datasets", "--json", "--data-dir", str(tmp_path)).stdout)
    assert [d["dataset"] for d in data] == sorted(d["dataset"] for d in data)
    assert set(data[0]) == {"dataset", "protocol", "source", "origin", "url", "paper_size", "enabled", "raw",
                            "sessions", "samples", "stale"}
    assert next(d for d in data if d["dataset"] == "sample")["enabled"] is True


def test_models_lists_every_model_with_what_it_takes():
    """`seqpe models`: no command listed the models, their encodings, objectives, presets and options (a user
    learnt them from error messages)."""
    from models import MODELS
    proc = cli("models")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in proc.stdout
    for name in MODELS:
        assert any(f"│ {name} " in line for line in lines), name
    assert "[history" in proc.stdout          # BST's "Transformer over [history ; target]": not read as rich markup
    data = {e["name"]: e for e in json.loads(cli("models", "--json").stdout)}
    assert set(data) == set(MODELS)
    assert (data["fparec"]["encoding"], data["fparec"]["objectives"]) == ("fparec", ["prefixes", "sequence"])
    assert (data["pop"]["takes_encoding"], data["pop"]["fitted"], data["din"]["objectives"]) == (False, True, [])
    assert data["posrec"]["presets"] == {"paper": ["diginetica", "yoochoose"]}
    # walk 40b #4: "any" for models whose build refuses attention-stage encodings (STAMP with rope)
    assert [data[m]["takes"][:16] for m in ("stamp", "linear_attention", "token_mixing")] == ["input-stage only"] * 3
    assert data["sasrec"]["takes"] == "any" and "not RMHA, ALiBi" in data["din"]["takes"]
    for name in ("parec", "fparec"):        # walk 43b #5: "parec (its own)", though each trains the whole family
        assert data[name]["takes"] == ("the PARec family: parec, fparec, average, linear_annealing, "
                                       f"exponential_annealing (default {name})")
    assert data["srgnn"]["options"]["steps"] == 1 and data["carca"]["side_information"] is True


def test_a_cell_or_title_with_brackets_is_shown_as_written():
    """rich read "[x]" in a cell, title or caption as markup and dropped it (a path, BST's description)."""
    out = render(lambda c: print_tables(c, "runs in /data/[old]", [Col("name", key=True), Col("note", wrap=True)],
                                        [["a[b]", "[bold]kept[/bold]"]], caption="see [docs]"))
    assert "/data/[old]" in out and "a[b]" in out and "[bold]kept[/bold]" in out and "see [docs]" in out


def test_datasets_lists_the_imports_of_params_yaml(tmp_path):
    import yaml
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["imports"] = {"beauty_s3rec": {"path": "inbox/Beauty.txt", "format": "sasrec"}}
    params["study"]["next_item"]["datasets"].append("beauty_s3rec")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "data/samples/beauty_s3rec").mkdir(parents=True)
    (tmp_path / "data/samples/beauty_s3rec/manifest.json").write_text("{}")
    data = json.loads(cli("datasets", "--json", "--params", str(tmp_path / "params.yaml"),
                          "--data-dir", str(tmp_path / "data")).stdout)
    assert [d["dataset"] for d in data] == sorted(d["dataset"] for d in data)
    entry = next(d for d in data if d["dataset"] == "beauty_s3rec")
    assert entry["protocol"] == "leave_one_out" and entry["enabled"] is True and entry["source"] == \
        "imports: inbox/Beauty.txt" and (entry["sessions"], entry["samples"]) == (False, True)


def test_a_registered_name_holding_imported_data_shows_the_import(tmp_path):
    """After `seqpe import beauty Beauty.txt`, `datasets` said beauty came from the registry's URL."""
    manifest = {"stage": "import", "dataset": "beauty", "protocol": "leave_one_out",
                "protocol_info": {"format": "sasrec"}, "source": {"Beauty.txt": {"sha256": "0" * 64}}}
    (tmp_path / "samples/beauty").mkdir(parents=True)
    (tmp_path / "samples/beauty/manifest.json").write_text(json.dumps(manifest))
    data = json.loads(cli("datasets", "--json", "--data-dir", str(tmp_path)).stdout)
    entry = next(d for d in data if d["dataset"] == "beauty")
    assert entry["source"] == "Beauty.txt" and entry["url"] is None and entry["samples"] is True
    assert entry["origin"].startswith("sasrec format, seqpe import (registered source: ")
    assert next(d for d in data if d["dataset"] == "toys")["url"]              # a registered one not imported
