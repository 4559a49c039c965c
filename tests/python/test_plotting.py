"""Plotting helpers (issue 50 item 6): what each draws is the engine's numbers under the desktop
program's definitions (colour maps and ranges, paradigm colours, one model's layers per axis)."""
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attnlens  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "..", "resources", "examples"))


@pytest.fixture(scope="module")
def dump():
    with attnlens.open(os.path.join(EXAMPLES, "attnlens-example.h5")) as d:
        yield d


def test_colour_maps_and_ranges_are_the_desktop_programs():
    viridis, diverging = attnlens.colour_map("viridis"), attnlens.colour_map("blue-white-red")
    np.testing.assert_allclose(viridis(0.0)[:3], np.array([68, 1, 84]) / 255, atol=1e-9)
    np.testing.assert_allclose(viridis(1.0)[:3], np.array([253, 231, 37]) / 255, atol=1e-9)
    np.testing.assert_allclose(diverging(0.5)[:3], np.array([247, 247, 247]) / 255, atol=5e-3)  # white at 0 (256 levels)
    np.testing.assert_allclose(diverging(0.0)[:3], np.array([5, 48, 97]) / 255, atol=1e-9)
    from attnlens.plotting import colour_range
    assert colour_range([-0.2, 0.1, 0.5]) == (-0.5, 0.5, True)   # signed: symmetric about 0
    assert colour_range([0.1, 0.3]) == (0.0, 0.3, False)          # from min(0, lowest) to the highest
    assert colour_range([0.0, 0.0]) == (0.0, 1.0, False)
    assert colour_range([float("nan"), 0.25]) == (0.0, 0.25, False)


@pytest.mark.parametrize("paradigm, signed", [("softmax", False), ("inline", True)])
def test_plot_row_draws_the_row_on_the_grid(dump, paradigm, signed):
    head = dump.head(0, "inline.block0", 1)
    fig = attnlens.plot_row(head, paradigm, (4, 9), overlay=dump.image(0))
    ax = fig.axes[0]
    shown = ax.images[-1]  # the map, above the image
    row = head.row(paradigm, (4, 9))
    np.testing.assert_array_equal(shown.get_array(), row[1:].reshape(14, 14))
    lower, upper = shown.norm.vmin, shown.norm.vmax
    if signed:
        assert row.min() < 0 and lower == -upper == -max(abs(row.min()), abs(row.max()))
    else:
        assert lower == 0 and upper == row.max()
    assert len(ax.images) == 2 and ax.images[0].get_array().shape[:2] == dump.image(0).shape[:2]
    assert "prefix weight" in ax.get_title() and "\ninline.block0, head 1, image 0" in ax.get_title()
    plt.close(fig)


def test_plot_row_on_reduced_keys(tmp_path):
    with attnlens.open(os.path.join(EXAMPLES, "attnlens-example-hierarchical.h5")) as d:
        layer = next(l for l in d.layers if "keys" in l and l["keys"]["grid"] != l["grid"])
        head = d.head(0, layer["name"], 0)
        fig = attnlens.plot_row(head, "softmax", 5, key_grid=tuple(layer["keys"]["grid"]))
        h, w = layer["keys"]["grid"]
        np.testing.assert_array_equal(fig.axes[0].images[-1].get_array(),
                                      head.row("softmax", 5)[layer["keys"]["prefix_tokens"]:].reshape(h, w))
        with pytest.raises(ValueError, match="key_grid"):
            attnlens.plot_row(head, "softmax", 5, key_grid=(h + 1, w))
        plt.close("all")


def test_plot_local_mass_puts_one_models_layers_on_one_axis(dump):
    report = dump.analyze(stats="local", images="0-1")
    fig = attnlens.plot_local_mass(report)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["softmax", "linear_relu", "focused", "inline", "mala"]
    # A second computation of every point: pandas' mean of the records' 3x3 mass per (layer, paradigm).
    frame = report.to_pandas()
    means = frame.groupby(["layer", "paradigm"])["local_k3_mean"].mean()
    ratios = frame.groupby(["layer", "paradigm"])["local_k3_x_uniform"].mean()
    for ax in panels:
        model = ax.get_title()
        assert list(ax.get_xticks()) == [0, 1, 2, 3]  # whole layers, no fractional ticks
        assert [t.get_text() for t in ax.get_xticklabels()] == ["block0", "block1", "block2", "block3"]
        for line in ax.get_lines():
            if line.get_label().startswith("uniform"):
                continue
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                assert math.isclose(y, means[(f"{model}.block{x}", line.get_label())], rel_tol=1e-12)
    fig = attnlens.plot_local_mass(report, x_uniform=True, models="mala")
    ax = fig.axes[0]
    for line in ax.get_lines():
        if not line.get_label().startswith("uniform"):
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                assert math.isclose(y, ratios[(f"mala.block{x}", line.get_label())], rel_tol=1e-9)
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert colours["softmax"] == "#1f77b4" and colours["mala"] == "#e377c2"  # the desktop program's
    with pytest.raises(ValueError, match="local mass"):
        attnlens.plot_local_mass(report, k=9)
    plt.close("all")


def test_plot_claims_lists_every_claim_with_its_verdict(dump):
    claims = dump.claims(images="0")
    fig = attnlens.plot_claims(claims)
    table = fig.axes[0].tables[0]
    cells = table.get_celld()
    assert max(r for r, _ in cells) == len(claims["claims"])
    for i, claim in enumerate(claims["claims"], start=1):
        assert cells[(i, 2)].get_text().get_text() == claim["verdict"].replace("_", " ")
        assert cells[(i, 0)].get_text().get_text() == claim["paper"]
    plt.close(fig)
