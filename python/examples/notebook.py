"""The README's notebook example: one head's map, the per-layer local mass, and a rollout.

    PYTHONPATH=build/release/python /usr/bin/python3 python/examples/notebook.py [OUTDIR]

The same steps, with the claims table, are the notebook python/examples/attnlens.ipynb.
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")  # in a notebook, leave this out
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import attnlens  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else "."
dump = attnlens.open(os.path.join(here, "..", "..", "resources", "examples", "attnlens-example.h5"))

# One head's attention map: the centre query's row under softmax and InLine, over the input image,
# in the desktop program's colours (InLine's signed row on blue-white-red, white at 0).
head = dump.head(image=0, layer="inline.block0", head=0)
fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
for ax, paradigm in zip(axes, ["softmax", "inline"]):
    attnlens.plot_row(head, paradigm, (7, 7), overlay=dump.image(0), ax=ax)
fig.savefig(os.path.join(out, "map.png"))

# The 3x3 local mass per layer (InLine Fig. 3): one panel per model, its own layers on its axis.
report = dump.analyze(stats="local", images="0-3", local_k=3)
attnlens.plot_local_mass(report).savefig(os.path.join(out, "local_mass.png"))

# The attention rollout of CLS through the first four layers.
rollout = dump.rollout(image=0, query="cls", layers="0-3", paradigms="softmax,focused")
for result in rollout["results"]:
    grid = np.array(result["grid"], dtype=float)
    print(result["paradigm"]["name"], "rollout peak at", np.unravel_index(np.nanargmax(grid), grid.shape))
