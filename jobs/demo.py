"""The main job on the embedded defaults (local Ray, DuckDB, local files) over ../shared/data.

    make demo   # == python jobs/demo.py --data ../shared/data --out demo-out
"""
from __future__ import annotations

import argparse
import json
import os

import _common  # noqa: F401  (puts the repo on sys.path)

from refinery import leakage, razor, upsample, weights, zfilter
from refinery.audit import AuditConfig, audit, write_outputs
from refinery.corpus import convert, load
from refinery.inspect import format_inspection, inspect
from refinery.report import terminal_topk
from refinery.schema import PRESETS


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--out", default="demo-out")
    args = p.parse_args()
    snli = [os.path.join(args.data, "snli", f) for f in ("snli_dev.jsonl", "snli_test.jsonl")]
    corpus = os.path.join(args.out, "snli")

    print("== convert: SNLI dev + test -> canonical corpus")
    manifest = convert(snli, corpus, PRESETS["snli"])
    print(f"{corpus}: {manifest['rows']:,} rows, {manifest['rejected']:,} rejected")

    print("\n== inspect")
    print(format_inspection(inspect([corpus])))

    print("\n== audit (Ray Data pipeline on local Ray)")
    result = audit([corpus], config=AuditConfig(k=20), engine="ray")
    summary = write_outputs(result, os.path.join(args.out, "audit"), [corpus], title="SNLI dev+test audit")
    print(terminal_topk(result.top_k()))
    print(f"\nreport: {os.path.join(args.out, 'audit', 'report.html')}")

    print("\n== zfilter (Wu et al. 2022, k = 20)")
    zf = zfilter.run([corpus], os.path.join(args.out, "zfilter"), config=zfilter.ZFilterConfig(k=20))
    print(f"kept {zf['kept']:,}, rejected {zf['rejected']:,}; max z* before {zf['max_z_before']} "
          f"after {zf['max_z_after']}")

    print("\n== upsample (AUDAC, k = 10)")
    up = upsample.run([corpus], os.path.join(args.out, "upsample"), config=upsample.UpsampleConfig(k=10))
    print(f"{up['rows_before']:,} -> {up['rows_after']:,} rows; max p̂ after: {up['max_p_after']}; "
          f"uncorrectable: {[u['token'] for u in up['uncorrectable']]}")

    print("\n== leakage (Zhang et al. 2019): dev + test as one sentence graph")
    splits = {"dev": snli[0], "test": snli[1]}
    lk = leakage.run(splits, os.path.join(args.out, "leakage"), PRESETS["snli"])
    print(f"{lk['edges']:,} pairs, {lk['nodes']:,} sentences: leakage accuracy {lk['leakage_accuracy']:.4f} vs "
          f"majority {lk['majority_accuracy']:.4f}; report: {os.path.join(args.out, 'leakage', 'report.html')}")

    print("\n== weights (leakage-neutral IPS)")
    wt = weights.run(splits, os.path.join(args.out, "weighted"), PRESETS["snli"])
    d = wt["diagnostics"]
    print(f"weights min {d['min']:.3f}, max {d['max']:.2f}, effective sample size {d['effective_sample_size']:,.0f}")

    print("\n== razor --score-only (shortcut scores; the rewrite loop needs a generator: refinery razor)")
    table, _ = load([corpus])
    rz = razor.run(table, os.path.join(args.out, "razor"), score_only=True)
    print(f"{rz['rows']:,} rows scored on {rz['field']}: objective {rz['objective']:.6g}, γ quantiles {rz['gamma']}")
    with open(os.path.join(args.out, "demo.json"), "w") as fh:
        json.dump({"corpus": manifest["rows"], "max_z": summary["max_z"], "zfilter": {"kept": zf["kept"],
                   "rejected": zf["rejected"]}, "upsample": {"rows_after": up["rows_after"]},
                   "leakage": {"accuracy": lk["leakage_accuracy"], "majority": lk["majority_accuracy"]},
                   "weights": d, "razor": {"objective": rz["objective"], "gamma": rz["gamma"]}}, fh, indent=1)


if __name__ == "__main__":
    main()
