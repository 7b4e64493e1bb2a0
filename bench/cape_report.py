"""CAPE (paper 001) Tables 2 and 3: measured rows next to the paper's (bench/bench_cape.sh calls it).

    .venv/bin/python bench/cape_report.py table2 OUT/report/*.json [--generated] --out OUT/table2.md
    .venv/bin/python bench/cape_report.py table3 OUT/report/books_hllm*.json [--generated] --out OUT/table3.md

Input: the output of `seqpe report RUNS --json` (one or more files: rows with mean / std / 95% CI
over seeds of every test metric, and the comparison with the baseline configuration of each file).
The paper's values come from bench/cape_paper_001.json (001 Table 2: gAUC / AUC / logloss on
AmazonElectronics and KuaiVideo; 001 Table 3: Recall@K and NDCG@K x100 on AmazonBooks).

Table 2: one Markdown table per dataset; a measured cell is "mean ± CI half-width" (6 decimals, as
001 prints its values), the paper's value beside it, and the verdict of `seqpe report`'s tests
against the same backbone's first encoding (none). A generated dataset is set against the real
dataset of its format (a name with "kuai" -> KuaiVideo, else AmazonElectronics), so the rows line up;
the numbers are not comparable.
Table 3: per depth (tag bN) and encoding, Recall@K (seqpe's HR@K: one target per user) and NDCG@K
x100 next to 001's, and "Avg Impv.(%)" computed as 001 does: the mean over the four K of the
relative change against naive PE (lpe) at the same depth.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

PAPER = Path(__file__).resolve().parent / "cape_paper_001.json"
NAMES = {"none": "None", "lpe": "Naïve", "rope": "RoPE", "cope": "CoPE", "cape": "CAPE",
         "din": "DIN", "dien": "DIEN", "bst": "BST", "dmin": "DMIN", "sasrec_ctr": "SASRec", "sasrec": "SASRec"}
KS = ("5", "10", "50", "200")
WARNING = ("**Generated data: these numbers are NOT comparable with the paper's.** The rows come from data "
           "seqpe generates (other sizes and vocabularies; the CTR sets follow a planted positional rule) and "
           "from short runs; the paper's column is shown only so that the layout matches 001's table.")


def read_rows(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            print(f"skipped {path}: empty (its `seqpe report` failed)", file=sys.stderr)
            continue
        data = json.loads(text)
        rows += data if isinstance(data, list) else data.get("rows", [])
    return rows


def cell(stat: dict | None, scale: float = 1.0, digits: int = 6) -> str:
    if not stat:
        return "-"
    text = f"{scale * stat['mean']:.{digits}f}"
    if stat.get("ci95") is not None:
        text += f" ± {scale * stat['ci95']:.{digits}f}"
    return text


def verdict(row: dict) -> str:
    comp = row.get("comparison")
    if comp is None:
        return "baseline"
    return comp["verdict"].replace("|", "/")


def paper_dataset(name: str) -> str:
    return "kuaivideo" if "kuai" in name.lower() else "amazon_electronics"


def table2(rows: list[dict], generated: bool) -> str:
    paper = json.loads(PAPER.read_text(encoding="utf-8"))["table2"]
    ref = {(r["model"], r["encoding"]): r for r in paper["rows"]}
    order = {m: i for i, m in enumerate(dict.fromkeys(r["model"] for r in paper["rows"]))}
    enc_order = {e: i for i, e in enumerate(("none", "lpe", "rope", "cope", "cape"))}
    out = [f"# CAPE (001) Table 2: measured vs paper\n", f"Paper values: {paper['caption']}\n"]
    if generated:
        out.append(WARNING + "\n")
    for ds in sorted({r["dataset"] for r in rows}):
        pds = paper_dataset(ds)
        out.append(f"## {ds} (paper column: {pds})\n")
        out.append("| backbone | PE | seeds | best epochs | gAUC | 001 gAUC | AUC | 001 AUC | logloss | 001 logloss "
                   "| vs the backbone's none (seqpe report) |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        mine = sorted((r for r in rows if r["dataset"] == ds),
                      key=lambda r: (order.get(r["model"], 99), r["model"], enc_order.get(r["encoding"], 99),
                                     r["encoding"], r.get("tag") or ""))
        for r in mine:
            p = {k: f"{v:.6f}" for k, v in ref.get((r["model"], r["encoding"]), {}).get(pds, {}).items()}
            m = r["metrics"]
            name = NAMES.get(r["encoding"], r["encoding"]) + (f" ({r['tag']})" if r.get("tag") else "")
            out.append(f"| {NAMES.get(r['model'], r['model'])} | {name} | {len(r['seeds'])} | "
                       f"{', '.join(str(e) for e in r['best_epochs'])} | {cell(m.get('gauc'))} | {p.get('gauc', '-')} | "
                       f"{cell(m.get('auc'))} | {p.get('auc', '-')} | {cell(m.get('logloss'))} | "
                       f"{p.get('logloss', '-')} | {verdict(r)} |")
        out.append("")
    out.append("Cells: mean ± half-width of the 95% confidence interval over seeds (t distribution; none "
               "for one seed). AUC and gAUC as pipeline/REFERENCE.md §5 (gAUC: per-user AUC weighted by "
               "the user's rows, one-class users skipped).")
    return "\n".join(out) + "\n"


def improvement(mine: dict, base: dict, key: str) -> float | None:
    """001's Avg Impv.(%): mean over K of 100 (x_K / naive_K - 1)."""
    vals = []
    for k in KS:
        a, b = mine.get(f"{key}@{k}"), base.get(f"{key}@{k}")
        if not a or not b or not b["mean"]:
            return None
        vals.append(100 * (a["mean"] / b["mean"] - 1))
    return sum(vals) / len(vals)


def table3(rows: list[dict], generated: bool) -> str:
    paper = json.loads(PAPER.read_text(encoding="utf-8"))["table3"]
    ref = {(r["blocks"], r["encoding"]): r for r in paper["rows"]}
    enc_order = {e: i for i, e in enumerate(("lpe", "rope", "cape"))}
    out = ["# CAPE (001) Table 3: measured vs paper\n", f"Paper values: {paper['caption']}\n"]
    if generated:
        out.append(WARNING + "\n")

    def blocks(r: dict) -> int:
        hit = re.fullmatch(r"b(\d+)", r.get("tag") or "")
        return int(hit.group(1)) if hit else -1
    for ds in sorted({r["dataset"] for r in rows}):
        mine = sorted((r for r in rows if r["dataset"] == ds and r["model"] == "sasrec"),
                      key=lambda r: (blocks(r), enc_order.get(r["encoding"], 99), r["encoding"]))
        base = {blocks(r): r["metrics"] for r in mine if r["encoding"] == "lpe"}
        out.append(f"## {ds}\n")
        head = ["# blocks", "PE", "seeds"]
        for key, label in (("hr", "R"), ("ndcg", "N")):
            for k in KS:
                head += [f"{label}@{k}", f"001 {label}@{k}"]
            head += [f"{label} Avg Impv.(%)", "001"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in mine:
            b, m = blocks(r), r["metrics"]
            p = ref.get((b, r["encoding"]))
            cells = [str(b), NAMES.get(r["encoding"], r["encoding"]), str(len(r["seeds"]))]
            for key, pkey in (("hr", "recall"), ("ndcg", "ndcg")):
                for k in KS:
                    cells += [cell(m.get(f"{key}@{k}"), 100, 5), f"{p[pkey][k]:.5f}" if p else "-"]
                imp = improvement(m, base.get(b, {}), key)
                cells += ["-" if imp is None else f"{imp:+.2f}", f"{p[pkey + '_avg_impv_pct']:+.2f}" if p else "-"]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append("Recall@K = HR@K (one held-out item per user), NDCG@K, x100, by full ranking over all items "
               "(pipeline/REFERENCE.md §5); cells: mean ± half-width of the 95% CI over seeds.")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=["table2", "table3"])
    ap.add_argument("reports", nargs="+", type=Path, help="`seqpe report --json` outputs")
    ap.add_argument("--generated", action="store_true", help="the runs are on generated data (adds the warning)")
    ap.add_argument("--out", type=Path, help="write the Markdown here (default: print it)")
    args = ap.parse_args()
    rows = read_rows(args.reports)
    if not rows:
        raise SystemExit("no rows in the reports: did the training runs fail? see OUT/logs/queue.log")
    text = (table2 if args.table == "table2" else table3)(rows, args.generated)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
