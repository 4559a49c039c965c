#!/usr/bin/python3
"""Independent check of `attnlens-cli claims` from `attnlens-cli analyze`'s records (issue 46 item 6).

usage: claims_check.py DUMP.h5 ANALYSIS.json CLAIMS.json [MIN_CHECKED (default 8)]

ANALYSIS.json: analyze over the same selection with every preset and --stats
rank,local,entropy,confusion,magnitude --local-k 3. The trained records are those whose paradigm is
the layer's `attention` attribute (read from the dump with h5py); the claims' numbers are
recomputed from them with plain Python means, and every verdict from its rule. Exits 1 on any
difference (numbers to 1e-12 relative) or when fewer than MIN_CHECKED claims were checked.
"""
import json
import math
import sys

import h5py

FAMILY = {"softmax": "softmax", "softmax_l2": "softmax", "linear_relu": "linear", "linear_elu": "linear",
          "focused": "linear", "inline": "inline", "inline_relu": "inline", "mala": "mala"}


def mean(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def main(dump, analysis, claims_file, min_checked="8"):
    with h5py.File(dump, "r") as f:
        own = {name: (g.attrs["attention"].decode() if isinstance(g.attrs["attention"], bytes) else str(g.attrs["attention"]))
               for name, g in f["layers"].items() if "attention" in g.attrs}
        dims = {name: int(g["q"].shape[3]) for name, g in f["layers"].items()}
        root_grid = [int(x) for x in f.attrs["grid"]]
        root_prefix = int(f.attrs.get("prefix_tokens", 0))
        # Per layer and head: the rank a d-feature kernel map can reach (min(N, n, d); per window
        # set on window layers) and softmax's ceiling min(N, n); None where Swin's mask splits windows.
        caps, ceilings = {}, {}
        for name, g in f["layers"].items():
            d, heads = dims[name], int(g["q"].shape[1])
            n_q, n_k = int(g["q"].shape[2]), int(g["k"].shape[2])
            gh, gw = [int(x) for x in g.attrs.get("grid", root_grid)]
            ceilings[name] = min(n_q, n_k)
            if "head_windows" in g.attrs:
                hw = [int(x) for x in g.attrs["head_windows"]]
                per_head = []
                for i in range(0, len(hw), 3):
                    count, mh, mw = hw[i:i + 3]
                    per_head += [(gh // mh) * (gw // mw) * min(mh * mw, d)] * count
                caps[name] = per_head
            elif "window_size" in g.attrs:
                mh, mw = [int(x) for x in g.attrs["window_size"]]
                masked = bool(g.attrs.get("window_mask", False)) and any(int(x) for x in g.attrs["window_shift"])
                caps[name] = None if masked else [(gh // mh) * (gw // mw) * min(mh * mw, d)] * heads
            else:
                caps[name] = [min(n_q, n_k, d)] * heads
    records = json.load(open(analysis))["results"]
    claims = {c["id"]: c for c in json.load(open(claims_file))["claims"]}
    trained = [r for r in records if own.get(r["layer"]) == r["paradigm"]]

    def of(family, need=None):
        return [r for r in trained if FAMILY.get(r["paradigm"]) == family and (need is None or need in r)]

    def x3(r):
        l = [e for e in r["local"] if e["k"] == 3][0]
        return l["mean"] / l["admissible_baseline"]

    def growth(r):
        m = r["magnitude"]
        unit = m["factors"].index(1.0)
        return m["max_weight"][-1] / m["max_weight"][unit]

    def ent(r):
        return r["entropy"]["normalised_entropy_abs_admissible"]

    failures, checked = [], 0

    def expect(cid, verdict, **numbers):
        nonlocal checked
        c = claims[cid]
        if c["verdict"] != verdict:
            failures.append(f"{cid}: verdict {c['verdict']}, recomputed {verdict}")
        for key, value in numbers.items():
            if not close(c["evidence"].get(key), value):
                failures.append(f"{cid}: {key} {c['evidence'].get(key)}, recomputed {value}")
        checked += 1

    lin = [r for r in of("linear", "rank") if caps[r["layer"]] is not None]
    if lin and len(lin) == len(of("linear", "rank")):
        over = sum(r["rank"]["rank"] > caps[r["layer"]][r["head"]] for r in lin)
        expect("flatten.linear_rank_at_most_d", "holds" if over == 0 else "fails",
               rank_mean=mean([r["rank"]["rank"] for r in lin]), records_above_bound=over)
    soft = of("softmax", "rank")
    if soft and all(caps[r["layer"]] is not None for r in soft):
        layers = sorted({r["layer"] for r in soft})
        cap = {l: mean([caps[l][r["head"]] for r in soft if r["layer"] == l]) for l in layers}
        testable = [l for l in layers if ceilings[l] > cap[l]]
        if testable:
            holds = all(mean([r["rank"]["rank"] for r in soft if r["layer"] == l]) > cap[l] for l in testable)
            expect("flatten.softmax_rank_above_d", "holds" if holds else "fails")
        else:
            expect("flatten.softmax_rank_above_d", "not_measurable")
    foc = [r for r in of("linear", "entropy") if r["paradigm"] == "focused"]
    plain = [r for r in of("linear", "entropy") if r["paradigm"] != "focused"]
    if foc and plain:
        f, p = mean(map(ent, foc)), mean(map(ent, plain))
        expect("flatten.focused_sharper_than_linear", "holds" if f < p else "fails",
               normalised_entropy_abs_admissible_focused=f, normalised_entropy_abs_admissible_plain=p)
    lc = of("linear", "confusion")
    if lc:
        m = mean([r["confusion"]["confused_pairs"] for r in lc])
        expect("inline.linear_not_injective", "holds" if m > 0 else "fails", confused_pairs_per_head_mean=m)
    lr = of("linear", "ray_probe")
    if lr:
        frac = mean([r["ray_probe"]["equal_fraction"] for r in lr])
        expect("inline.linear_rows_constant_along_rays", "holds" if frac >= 0.99 else "fails", equal_fraction_mean=frac)
    for family, cid in (("softmax", "inline.softmax_injective"), ("inline", "inline.inline_injective")):
        rs = of(family, "confusion")
        if rs:
            total = sum(r["confusion"]["confused_pairs"] for r in rs)
            far = sum(r["confusion"]["confused_pairs_far"] for r in rs)
            expect(cid, "holds" if total == 0 else "fails", confused_pairs_total=total, confused_pairs_far_total=far)
    sl, ll = of("softmax", "local"), of("linear", "local")
    if sl and ll:
        s, l = mean(map(x3, sl)), mean(map(x3, ll))
        expect("inline.softmax_more_local", "holds" if s > l else "fails",
               x_uniform_3x3_softmax=s, x_uniform_3x3_linear=l)
    sm, mm = of("softmax", "magnitude"), of("mala", "magnitude")
    if sm:
        change = mean([r["magnitude"]["entropy"][-1] - r["magnitude"]["entropy"][0] for r in sm])
        expect("mala.softmax_sharpens", "holds" if change < 0 else "fails", entropy_change_mean=change)
    if sm and mm:
        gm, gs = mean(map(growth, mm)), mean(map(growth, sm))
        expect("mala.sharpens_more_gently_than_softmax", "holds" if 1 < gm < gs else "fails",
               max_weight_growth_mala=gm, max_weight_growth_softmax=gs)
    me = of("mala", "entropy")
    if me:
        frac = mean([r["entropy"]["negative_weight_fraction"] for r in me])
        expect("mala.no_negative_weights", "holds" if frac == 0 else "fails", negative_weight_fraction_mean=frac)
    se, le = of("softmax", "entropy"), of("linear", "entropy")
    if se and me and le:
        s, m, l = mean(map(ent, se)), mean(map(ent, me)), mean(map(ent, le))
        expect("mala.entropy_order", "holds" if s < m < l else "fails", normalised_entropy_abs_admissible_softmax=s,
               normalised_entropy_abs_admissible_mala=m, normalised_entropy_abs_admissible_linear=l)
    print(f"checked {checked} claims against {len(trained)} trained records")
    for f in failures:
        print("MISMATCH", f)
    return 0 if checked >= int(min_checked) and not failures else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
