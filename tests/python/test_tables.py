"""Results a notebook wants (issue 50 item 5): reports as flat tables keyed alike in records and
summaries, progress callbacks for the long calls, and a dump's length, iteration and heads."""
import json
import math
import os

import numpy as np
import pytest

import attnlens

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "..", "resources", "examples", "attnlens-example.h5"))


@pytest.fixture(scope="module")
def dump():
    with attnlens.open(EXAMPLE) as d:
        yield d


@pytest.fixture(scope="module")
def report(dump):
    return dump.analyze(stats="rank,local,entropy", images="0-1", layers="0,4,8")


def test_a_report_is_still_the_dict_of_the_cli(report):
    assert isinstance(report, dict) and isinstance(report, attnlens.Report)
    assert json.loads(json.dumps(report)) == dict(report)
    assert report["schema"] == "attnlens.analysis"


def test_records_are_one_row_per_record_with_every_scalar(report):
    cols = report.records()
    rows = report["results"]
    assert len(cols["image"]) == len(rows) == 2 * 3 * 3 * 8  # images x layers x heads x paradigms
    for i, r in enumerate(rows):  # a second reading of each record, field by field
        assert cols["image"][i] == r["image"] and cols["layer"][i] == r["layer"]
        assert cols["paradigm"][i] == r["paradigm"] and isinstance(r["paradigm"], str)
        assert cols["rank_rank"][i] == r["rank"]["rank"]
        assert cols["rank_effective_rank"][i] == r["rank"]["effective_rank"]
        for window in r["local"]:
            assert cols[f"local_k{window['k']}_mean"][i] == window["mean"]
            assert cols[f"local_k{window['k']}_x_uniform"][i] == window["x_uniform"]
    assert "rank_singular_values" not in cols  # lists of numbers stay in the dict
    assert all(len(v) == len(rows) for v in cols.values())


def test_summary_tables_use_the_records_column_names(report):
    records = report.records()
    heads = report.records("heads")
    assert {"paradigm", "layer", "head", "local_k3_mean", "local_k7_x_uniform"} <= set(heads)
    # Each per-head mean is the mean of that head's records (a second computation from the rows).
    for i in range(len(heads["paradigm"])):
        key = (heads["paradigm"][i], heads["layer"][i], heads["head"][i])
        values = [records["local_k3_mean"][j] for j in range(len(records["image"]))
                  if (records["paradigm"][j], records["layer"][j], records["head"][j]) == key]
        assert len(values) == 2
        assert math.isclose(heads["local_k3_mean"][i], sum(values) / 2, rel_tol=1e-12)
    layers = report.records("layers")
    assert set(layers["layer"]) == {"softmax.block0", "linear_relu.block0", "focused.block0"}
    with pytest.raises(ValueError, match="table must be"):
        report.records("nonesuch")


def test_to_pandas_gives_the_records_as_a_data_frame(report):
    pandas = pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup-debian.sh python)")
    frame = report.to_pandas()
    assert list(frame.columns) == list(report.records())
    assert len(frame) == len(report["results"])
    means = frame.groupby(["paradigm", "layer"])["local_k3_mean"].mean()
    summary = report.records("layers")
    for i in range(len(summary["layer"])):
        assert math.isclose(means[(summary["paradigm"][i], summary["layer"][i])], summary["local_k3_mean"][i],
                            rel_tol=1e-12)


def test_claims_sweep_locality_and_rollout_are_reports_too(dump):
    claims = dump.claims(images="0", layers="0,16")
    assert isinstance(claims, attnlens.Report)
    table = claims.records("claims")
    assert len(table["id"]) == len(claims["claims"]) and all(isinstance(v, str) for v in table["verdict"])
    assert isinstance(dump.locality(images="0", layers="0"), attnlens.Report)
    rollout = dump.rollout(0, "cls", layers="0-1", paradigms="softmax,mala")
    assert isinstance(rollout, attnlens.Report)
    # Its results hold each paradigm's definition; the table has the name, as analyze's records do.
    assert isinstance(rollout["results"][0]["paradigm"], dict)
    assert rollout.records()["paradigm"] == [r["paradigm"]["name"] for r in rollout["results"]] == ["softmax", "mala"]


def test_progress_reaches_a_callable_and_a_tqdm_bar(dump):
    calls = []
    report = dump.analyze(stats="local", images="0-1", layers="0-1",
                          progress=lambda done, total: calls.append((done, total)))
    total = 2 * 2 * 3 * 8
    assert calls and calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert len(report["results"]) == total

    class Bar:  # what tqdm offers: a total to set and update(n)
        def __init__(self):
            self.total, self.n, self.refreshed = None, 0, 0

        def update(self, n):
            self.n += n

        def refresh(self):
            self.refreshed += 1

    bar = Bar()
    dump.sweep("mala", "qscale=0.5:2:3", images="0", layers="16", stats="entropy", progress=bar)
    assert bar.total == 3 * 3 and bar.n == bar.total  # 3 points x 3 heads of the one paradigm swept
    bar = Bar()
    dump.locality(images="0-2", layers="0", progress=bar)
    assert bar.total == 3 and bar.n == 3
    tqdm = pytest.importorskip("tqdm", reason="python3-tqdm is not installed (scripts/setup-debian.sh all)")
    with tqdm.tqdm(file=open(os.devnull, "w")) as real:
        dump.claims(images="0", layers="0", progress=real)
        assert real.total == 3 * 8 and real.n == real.total  # claims analyse every preset


def test_a_progress_callback_that_raises_stops_the_call(dump):
    seen = []

    def stop(done, total):
        seen.append(done)
        if done > 0:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        dump.analyze(images="0-9", progress=stop)
    assert seen and seen[-1] < 10 * 20 * 3 * 8
    with pytest.raises(attnlens.UsageError, match="progress must be a callable"):
        dump.analyze(progress=3)
    with pytest.raises(attnlens.UsageError, match=r"allowed: .*progress"):
        dump.claims(no_such_option=1)


def test_a_dump_is_its_layers_and_lists_its_heads(dump):
    assert len(dump) == len(dump.layers) == 20
    assert [layer["name"] for layer in dump] == [layer["name"] for layer in dump.layers]
    heads = list(dump.heads(1, layers=[0, "mala.block3", -1]))
    assert [(h.layer, h.head, h.image) for h in heads] == \
        [("softmax.block0", 0, 1), ("softmax.block0", 1, 1), ("softmax.block0", 2, 1)] + \
        [("mala.block3", h, 1) for h in range(3)] * 2
    np.testing.assert_array_equal(heads[4].q, dump.head(1, "mala.block3", 1).q)
    assert sum(1 for _ in dump.heads(0)) == 20 * 3
    with pytest.raises(attnlens.UsageError):
        list(dump.heads(0, layers=["nonesuch"]))
