"""Plots for a notebook (issue 50 item 6), with the desktop program's colour maps and definitions.

    fig = attnlens.plot_row(head, "inline", (7, 7), overlay=dump.image(0))   # one query's map
    fig = attnlens.plot_local_mass(report)             # per model: its layers on one axis
    fig = attnlens.plot_claims(dump.claims())          # the papers' claims and their verdicts

Each function draws into `ax` (an Axes, or a sequence of them for plot_local_mass) or a new figure,
and returns the figure. matplotlib (Debian's python3-matplotlib) is imported on first use.

Definitions, as the desktop program's (docs/DESKTOP.md "Desktop program"): a row with no negative weight is
drawn on viridis from min(0, lowest) to its highest weight; a signed row (InLine's, linear attention
without a kernel) on blue-white-red symmetric about 0, so that white is exactly 0. Paradigms are
coloured by their place in the report's paradigm list (Tableau 10). A model is the part of a layer
name before its last "." (MODEL.BLOCK, as analyze's --model); its layers are drawn in the dump's
order at whole-number positions, labelled with their names.
"""
import math

# The desktop program's maps (app/gui/plot/color_maps.cpp): stops, interpolated in RGB.
VIRIDIS_STOPS = [(0.0, (68, 1, 84)), (0.125, (71, 44, 122)), (0.25, (59, 81, 139)), (0.375, (44, 113, 142)),
                 (0.5, (33, 144, 141)), (0.625, (39, 173, 129)), (0.75, (92, 200, 99)), (0.875, (170, 220, 50)),
                 (1.0, (253, 231, 37))]
BLUE_WHITE_RED_STOPS = [(0.0, (5, 48, 97)), (0.2, (67, 147, 195)), (0.4, (209, 229, 240)), (0.5, (247, 247, 247)),
                        (0.6, (253, 219, 199)), (0.8, (214, 96, 77)), (1.0, (103, 0, 31))]
# Tableau 10 (app/gui/views/plot_view.cpp, paradigmColor).
PARADIGM_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                    "#bcbd22", "#17becf"]
VERDICT_COLOURS = {"holds": "#2ca02c", "fails": "#d62728", "not_measurable": "#7f7f7f"}


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("attnlens' plots need matplotlib: install Debian's python3-matplotlib",
                                  name="matplotlib") from e
    return plt


def colour_map(name):
    """The desktop program's "viridis" or "blue-white-red" as a matplotlib colormap."""
    from matplotlib.colors import LinearSegmentedColormap
    stops = {"viridis": VIRIDIS_STOPS, "blue-white-red": BLUE_WHITE_RED_STOPS}[name]
    return LinearSegmentedColormap.from_list(f"attnlens-{name}",
                                             [(p, tuple(c / 255 for c in rgb)) for p, rgb in stops], N=256)


def colour_range(values):
    """(lower, upper, diverging) as the desktop program's colorRangeFor: a row with a negative weight is
    diverging and symmetric about 0; otherwise from min(0, lowest) to the highest weight."""
    finite = [float(v) for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if lo < 0:
        m = max(abs(lo), abs(hi)) or 1.0
        return -m, m, True
    lower = min(0.0, lo)
    upper = hi if hi > lower else lower + (1.0 if lower == 0 else abs(lower))
    return lower, upper, False


def _key_grid(keys, grid):
    """The (h, w) grid of `keys` spatial keys: the query grid when it has that many tokens, else the
    factor pair with the grid's aspect (PVT's reduced keys)."""
    h, w = grid
    if keys == h * w:
        return h, w
    pairs = [(a, keys // a) for a in range(1, keys + 1) if keys % a == 0]
    return min(pairs, key=lambda p: abs(math.log(p[0] / p[1]) - math.log(h / w)))


def plot_row(head, paradigm, query, overlay=None, *, key_grid=None, ax=None, alpha=0.65):
    """One query's attention row on the key grid, with a colour bar and the query marked.

    head: an attnlens.Head; query: a token index, (y, x) or "cls"; overlay: the input image (e.g.
    dump.image(i)) drawn beneath, stretched over the grid; key_grid (h, w) for keys on another grid
    than the queries' (PVT; by default the factor pair with the grid's aspect). The prefix tokens'
    weights are said in the title, not drawn."""
    import numpy as np
    plt = _pyplot()
    row = np.asarray(head.row(paradigm, query), dtype=float)
    # Keys on the queries' grid have the queries' prefix; reduced keys (PVT) the difference to key_grid.
    if head.keys == head.tokens:
        key_prefix = head.prefix
    else:
        key_prefix = head.keys - key_grid[0] * key_grid[1] if key_grid else 0
    if key_prefix < 0:
        raise ValueError(f"key_grid {tuple(key_grid)} holds {key_grid[0] * key_grid[1]} keys, the row has "
                         f"{head.keys}")
    spatial = row[key_prefix:]
    h, w = key_grid or _key_grid(len(spatial), head.grid)
    if h * w != len(spatial):
        raise ValueError(f"key_grid {key_grid} holds {h * w} keys, the row has {len(spatial)} spatial keys")
    lower, upper, diverging = colour_range(row)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 4.4))
    fig = ax.figure
    if overlay is not None:
        image = np.asarray(overlay)
        ax.imshow(image if image.ndim == 3 and image.shape[-1] == 3 else image.squeeze(), cmap="gray",
                  extent=(-0.5, w - 0.5, h - 0.5, -0.5), interpolation="bilinear")
    shown = ax.imshow(spatial.reshape(h, w), cmap=colour_map("blue-white-red" if diverging else "viridis"),
                      vmin=lower, vmax=upper, alpha=alpha if overlay is not None else 1.0, interpolation="nearest")
    bar = fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label("attention weight" + (" (signed: white is 0)" if diverging else ""))
    gy, gx = head.grid
    if isinstance(query, (tuple, list)):
        qy, qx = int(query[0]), int(query[1])
    elif isinstance(query, str):
        qy = qx = None
    else:
        index = int(query) - head.prefix
        qy, qx = (index // gx, index % gx) if index >= 0 else (None, None)
    if qy is not None:
        ax.plot((qx + 0.5) * w / gx - 0.5, (qy + 0.5) * h / gy - 0.5, marker="s", markersize=9, markerfacecolor="none",
                markeredgecolor="black", markeredgewidth=1.5, linestyle="none")
    where = f"{head.layer}, head {head.head}, image {head.image}" if head.layer is not None else "Head in memory"
    prefix = (f"; prefix weight {', '.join(f'{v:.3g}' for v in row[:key_prefix])}" if key_prefix else "")
    ax.set_title(f"{paradigm}: query {query!s}{prefix}\n{where}", fontsize=9)
    ax.set_xlabel("x (key column)")
    ax.set_ylabel("y (key row)")
    fig.tight_layout()
    return fig


def _model_of(layer):
    return layer.rsplit(".", 1)[0] if "." in layer else layer


def local_mass_curves(report, k=3, x_uniform=False):
    """What plot_local_mass draws: {model: {"layers": [names], "paradigms": {paradigm: [mean per layer]},
    "baseline": [mean admissible uniform baseline per layer]}}. The mean is over a layer's records
    (images and heads); x_uniform: each record's mass over its uniform baseline, then the mean."""
    records = report["results"]
    order = []
    for r in records:
        if r["layer"] not in order:
            order.append(r["layer"])
    order.sort(key=lambda name: next(r["layer_position"] for r in records if r["layer"] == name))
    curves = {}
    for layer in order:
        model = curves.setdefault(_model_of(layer), {"layers": [], "paradigms": {}, "baseline": []})
        model["layers"].append(layer)
    sums = {}
    for r in records:
        window = next((w for w in r.get("local") or [] if w["k"] == k), None)
        if window is None or window.get("mean") is None:
            continue
        value = window["mean"] / window["admissible_baseline"] if x_uniform else window["mean"]
        entry = sums.setdefault((r["layer"], r["paradigm"]), [0.0, 0, 0.0])
        entry[0] += value
        entry[1] += 1
        entry[2] += window["admissible_baseline"]
    if not sums:
        raise ValueError(f"the report has no {k} x {k} local mass (analyze with stats including 'local' and "
                         f"local_k including {k})")
    paradigms = [p["name"] for p in report.get("paradigms", [])]
    for model in curves.values():
        for paradigm in paradigms:
            model["paradigms"][paradigm] = [sums[(layer, paradigm)][0] / sums[(layer, paradigm)][1]
                                            if (layer, paradigm) in sums else float("nan")
                                            for layer in model["layers"]]
        model["baseline"] = [next((s[2] / s[1] for (layer2, _), s in sums.items() if layer2 == layer), float("nan"))
                             for layer in model["layers"]]
    return curves


def plot_local_mass(report, k=3, *, x_uniform=False, models=None, ax=None):
    """The k x k local mass per layer (InLine Fig. 3), one panel per model with its own layers on its
    x axis, one line per paradigm, and the uniform attention's mass on the same keys (dashed; the
    line at 1 with x_uniform). report: Dump.analyze's with the local statistic."""
    import numpy as np
    plt = _pyplot()
    curves = local_mass_curves(report, k, x_uniform)
    if models is not None:
        curves = {m: c for m, c in curves.items() if m in set([models] if isinstance(models, str) else models)}
    if not curves:
        raise ValueError(f"the report has no {k} x {k} local mass of the models asked for (analyze with "
                         f"stats including 'local' and local_k including {k})")
    if ax is None:
        fig, axes = plt.subplots(1, len(curves), figsize=(max(5, 3.6 * len(curves)), 3.8), squeeze=False,
                                 sharey=True)
        axes = list(axes[0])
    else:
        axes = list(ax) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
        if len(axes) != len(curves):
            raise ValueError(f"{len(curves)} models need {len(curves)} axes, got {len(axes)}")
    paradigms = [p["name"] for p in report.get("paradigms", [])]
    for axis, (model, curve) in zip(axes, curves.items()):
        x = list(range(len(curve["layers"])))
        for paradigm, values in curve["paradigms"].items():
            axis.plot(x, values, marker="o", markersize=4, label=paradigm,
                      color=PARADIGM_COLOURS[paradigms.index(paradigm) % len(PARADIGM_COLOURS)])
        if x_uniform:
            axis.axhline(1.0, color="black", linestyle="--", linewidth=1, label="uniform attention")
        else:
            axis.plot(x, curve["baseline"], color="black", linestyle="--", linewidth=1,
                      label="uniform attention (same keys)")
        axis.set_xticks(x)
        axis.set_xticklabels([name[len(model) + 1:] if name.startswith(model + ".") else name
                              for name in curve["layers"]], rotation=30, fontsize=8)
        axis.set_title(model, fontsize=10)
        axis.set_xlabel("layer")
    axes[0].set_ylabel(f"{k} x {k} mass" + (" over uniform" if x_uniform else " (fraction of the row)"))
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig = axes[0].figure
    fig.tight_layout()
    return fig


def plot_claims(claims, *, ax=None):
    """The claims document (Dump.claims) as a table: paper, claim, verdict (coloured) and its rule or
    the reason it could not be measured."""
    plt = _pyplot()
    rows = claims["claims"]
    if ax is None:
        fig, ax = plt.subplots(figsize=(12, 0.28 * len(rows) + 0.9))
    ax.axis("off")
    def cut(text, size=88):
        return text if len(text) <= size else text[:size - 1] + "\u2026"

    cells = [[c["paper"], c["id"].split(".", 1)[1].replace("_", " "), c["verdict"].replace("_", " "),
              cut(c["evidence"].get("rule") or c["evidence"].get("reason") or "")] for c in rows]
    table = ax.table(cellText=cells, colLabels=["paper", "claim", "verdict", "rule or reason (the whole in claims)"],
                     cellLoc="left", colWidths=[0.07, 0.24, 0.09, 0.6], bbox=[0, 0, 1, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for i, c in enumerate(rows, start=1):
        table[i, 2].set_facecolor(VERDICT_COLOURS.get(c["verdict"], "white"))
        table[i, 2].get_text().set_color("white")
    counts = {v: sum(c["verdict"] == v for c in rows) for v in VERDICT_COLOURS}
    ax.set_title(", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items()), fontsize=10)
    return ax.figure
