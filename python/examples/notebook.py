"""The README's notebook example: one head's map, the per-layer local mass, and a rollout.

    PYTHONPATH=build/release/python /usr/bin/python3 python/examples/notebook.py [OUTDIR]
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")  # in a notebook, leave this out
import matplotlib.pyplot as plt
import numpy as np

import attnlens

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else "."
dump = attnlens.open(os.path.join(here, "..", "..", "resources", "examples", "attnlens-example.h5"))
layer = dump.layers[3]
H, W = layer["grid"]

# One head's attention map: the centre query's row under softmax and InLine, on the grid.
head = dump.head(image=0, layer=3, head=0)
fig, axes = plt.subplots(1, 2, figsize=(8, 4))
for ax, paradigm in zip(axes, ["softmax", "inline"]):
    row = head.row(paradigm, (H // 2, W // 2))
    ax.imshow(row[layer["prefix_tokens"]:].reshape(H, W), cmap="viridis")
    ax.set_title(f"{paradigm}, {layer['name']}, head 0")
fig.savefig(os.path.join(out, "map.png"))

# The 3x3 local mass per layer, from the same report attnlens-cli analyze writes.
report = dump.analyze(stats="local", images="0-3", local_k=3)
mass = {}
for r in report["results"]:
    mass.setdefault(r["paradigm"], {}).setdefault(r["layer_position"], []).append(r["local"][0]["mean"])
fig, ax = plt.subplots(figsize=(6, 4))
for paradigm, per_layer in mass.items():
    positions = sorted(per_layer)
    ax.plot(positions, [np.mean(per_layer[p]) for p in positions], marker="o", label=paradigm)
ax.set_xlabel("layer")
ax.set_ylabel("3x3 local mass")
ax.legend(fontsize=7)
fig.savefig(os.path.join(out, "local_mass.png"))

# The attention rollout of CLS through the first four layers.
rollout = dump.rollout(image=0, query="cls", layers="0-3", paradigms="softmax,focused")
for result in rollout["results"]:
    grid = np.array(result["grid"], dtype=float)
    print(result["paradigm"]["name"], "rollout peak at", np.unravel_index(np.nanargmax(grid), grid.shape))
