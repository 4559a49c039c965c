#!/usr/bin/python3
"""Independent NumPy check of `attnlens-cli rollout` (docs/DEFINITIONS.md "Rollout") for the eight presets.

usage: rollout_check.py DUMP.h5 ROLLOUT.json

Forms every layer's attention matrices densely from the dump's q and k in float64, fuses the heads
and applies the residual as the export's options say (mean/max/min, clipped/absolute/signed, no
discard), multiplies R_L ... R_1 as vit-explain does (result = R_l @ result), and compares the
query's row. Exits 1 when the largest relative deviation exceeds 1e-9.
"""
import json
import sys

import h5py
import numpy as np

import numpy_attention


def attention(name, q, k, scale, kernel_applied):
    """The shared independent matrices (every preset; a custom paradigm is not checked)."""
    if name not in ("softmax", "linear_relu", "linear_elu", "focused", "inline", "inline_relu", "mala", "softmax_l2"):
        return None
    return numpy_attention.preset_attention(name, q, k, scale, kernel_applied)


def main(dump_path, export_path):
    export = json.load(open(export_path))
    opts = export["options"]
    assert opts["discard_ratio"] == 0, "the check does not discard"
    worst, checked = 0.0, 0
    with h5py.File(dump_path, "r") as f:
        img, query = export["input"]["image"], export["input"]["query"]
        for res in export["results"]:
            name = res["paradigm"]["name"]
            result = None
            for layer_name in export["input"]["layers"]:
                g = f["layers"][layer_name]
                scale = float(g.attrs["scale"]) if "scale" in g.attrs else 1 / np.sqrt(g["q"].shape[3])
                ws = []
                for h in range(g["q"].shape[1]):
                    a = attention(name, g["q"][img, h].astype(np.float64), g["k"][img, h].astype(np.float64), scale,
                                  bool(g.attrs.get("kernel_applied", 0)))
                    if a is None:
                        break
                    if opts["weights"] != "signed":
                        a = np.maximum(a, 0) if opts["weights"] == "clipped" else np.abs(a)
                        a = a / a.sum(axis=1, keepdims=True)
                    ws.append(a)
                if not ws:
                    break
                fused = {"mean": np.mean, "max": np.max, "min": np.min}[opts["fusion"]](np.stack(ws), axis=0)
                w = opts["residual"]
                r = (1 - w) * fused + w * np.eye(fused.shape[0])
                r = r / r.sum(axis=1, keepdims=True)
                result = r if result is None else r @ result
            if result is None:
                continue
            got = np.array([np.nan if v is None else v for v in res["row"]])
            worst = max(worst, float(np.max(np.abs(got - result[query]) / (1e-300 + np.abs(result[query])))))
            checked += 1
    presets = sum(1 for res in export["results"] if attention(res["paradigm"]["name"], np.ones((1, 1)), np.ones((1, 1)),
                                                                1.0, False) is not None)
    print(f"checked {checked} of {presets} presets; largest relative deviation {worst:.3g}")
    return 0 if checked > 0 and checked == presets and worst < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
