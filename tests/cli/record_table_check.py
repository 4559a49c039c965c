"""Second computation for analyze --records hdf5 (issue 30 goal 5), with h5py and NumPy only.

usage: record_table_check.py REPORT.json [FULL.json]

Reads the record table the report names (record_detail.file, relative to the report), checks its
columns against record_detail, recomputes the summary's per-paradigm, per-layer, per-head and
per-label means of several statistics from the table's rows with NumPy, and compares them with the
report's summary (relative 1e-12). With FULL.json (the same analysis with JSON records), every row
must equal the JSON record of the same (image, layer, head, paradigm) exactly.
"""
import json
import os
import sys

import h5py
import numpy as np


def close(a, b, where):
    if a is None or b is None:
        assert a is None and b is None, f"{where}: {a} vs {b}"
        return
    assert abs(a - b) <= 1e-12 * max(1.0, abs(a)), f"{where}: {a} vs {b}"


def main():
    report_path = sys.argv[1]
    report = json.load(open(report_path))
    detail = report["record_detail"]
    assert detail["format"] == "hdf5", detail["format"]
    table_path = os.path.join(os.path.dirname(report_path), detail["file"])
    with h5py.File(table_path, "r") as f:
        g = f[detail["group"]]
        assert g.attrs["schema"] in ("attnlens.records", b"attnlens.records")
        columns = {}
        for c in detail["columns"]:
            d = g[c["name"]]
            assert d.dtype == (np.int32 if c["dtype"] == "int32" else np.float64), c
            assert d.ndim == (1 if c["width"] == 0 else 2), c
            columns[c["name"]] = d[...]
        assert len(detail["columns"]) == len([k for k in g.keys() if k not in ("paradigm_names", "layer_names")])
        paradigms = [p.decode() if isinstance(p, bytes) else p for p in g["paradigm_names"][...]]
        layers = [p.decode() if isinstance(p, bytes) else p for p in g["layer_names"][...]]
    rows = len(columns["image"])
    assert rows == detail["records"], (rows, detail["records"])
    assert paradigms == [p["name"] for p in report["paradigms"]]

    labels = {e["image"]: e["label"] for e in report.get("image_labels", [])}
    label_of = np.array([labels.get(int(b), -(2**40)) for b in columns["image"]])
    k = report["options"]["local"]["k"][0] if "local" in report["options"] else 3
    statistics = {
        # summary field -> table column
        ("rank_mean",): np.where(columns["rank"] < 0, np.nan, columns["rank"].astype(float)),
        ("entropy_mean",): columns["entropy_mean"],
        ("local", str(k), "mean"): columns[f"local_mass_k{k}"],
    }
    for name in ("total_variation_mean",):
        statistics[("distance", name)] = columns[name]

    def mean(values, mask):
        v = values[mask]
        v = v[np.isfinite(v)]
        return float(np.mean(v)) if len(v) else None

    def field(entry, path):
        for p in path:
            if entry is None or p not in entry:
                return None
            entry = entry[p]
        return entry

    checked = 0
    for p, summary in enumerate(report["summary"]["per_paradigm"]):
        assert summary["paradigm"] == paradigms[p]
        of_p = columns["paradigm"] == p
        assert summary["records"] == int(of_p.sum())
        groups = [(summary, of_p)]
        for e in summary["layers"]:
            assert layers[e["layer_position"]] == e["layer"]
            groups.append((e, of_p & (columns["layer_position"] == e["layer_position"])))
        for e in summary["heads"]:
            groups.append((e, of_p & (columns["layer_position"] == e["layer_position"]) & (columns["head"] == e["head"])))
        for e in summary.get("labels", []):
            mask = of_p & (label_of == e["label"])
            assert e["images"] == len(set(columns["image"][mask].tolist()))
            groups.append((e, mask))
        for entry, mask in groups:
            assert entry["records"] == int(mask.sum()), (entry, int(mask.sum()))
            for path, values in statistics.items():
                expected = field(entry, path)
                if path[0] == "distance" and "distance" not in entry:
                    continue
                close(mean(values, mask), expected, f"{paradigms[p]} {entry.get('layer')} {entry.get('head')} "
                      f"{entry.get('label')} {'/'.join(path)}")
                checked += 1
    if len(sys.argv) > 2:
        full = json.load(open(sys.argv[2]))
        records = {(r["image"], r["layer_position"], r["head"], r["paradigm"]): r for r in full["results"]}
        assert len(records) == rows, (len(records), rows)
        for i in range(rows):
            r = records[(int(columns["image"][i]), int(columns["layer_position"][i]), int(columns["head"][i]),
                         paradigms[columns["paradigm"][i]])]
            assert r["rank"]["rank"] == columns["rank"][i]
            for j, local in enumerate(r["local"]):
                kk = local["k"]
                v = columns[f"local_mass_k{kk}"][i]
                assert (local["mean"] is None and np.isnan(v)) or local["mean"] == v, (i, kk)
            assert r["entropy"]["mean_entropy"] == columns["entropy_mean"][i]
            assert r["confusion"]["confused_pairs"] == columns["confused_pairs"][i]
            if "magnitude" in r:
                m = np.array([np.nan if x is None else x for x in r["magnitude"]["entropy"]])
                assert np.array_equal(m, columns["magnitude_entropy"][i], equal_nan=True), i
            if "distance" in r:
                assert r["distance"]["total_variation"]["mean"] == columns["total_variation_mean"][i]
            if "local_branch" in r and "rank" in r["local_branch"]:
                assert r["local_branch"]["rank"]["median"] == columns["branch_rank_median"][i]
    print(f"record table {table_path}: {rows} rows, {checked} summary means recomputed")


if __name__ == "__main__":
    main()
