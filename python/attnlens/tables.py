"""Reports as flat tables (issue 50 item 5): Dump.analyze, claims, sweep and locality return a Report,
the dict of the CLI's JSON with two methods for a notebook:

    report = dump.analyze(stats="rank,local")
    cols = report.records()             # {"image": [...], "layer": [...], "rank_rank": [...], "local_k3_mean": [...]}
    df = report.to_pandas()             # the same as a pandas.DataFrame (Debian's python3-pandas)
    per_head = report.records("heads")  # the summary's per (paradigm, layer, head) means, same column names

One row per record (image, layer, head, paradigm) of "results", or per entry of the summary's
per-layer or per-head tables. Nested fields are joined with "_" (rank.effective_rank ->
rank_effective_rank); local mass, a list of windows in a record and a dict keyed by the window
size in the summary, becomes local_k3_mean, local_k3_x_uniform, ... in both; a paradigm is its name
in every table (rollout's results hold its definition: the name is taken, the definition stays in the
dict); lists of numbers (singular values, curves) are left out (they are in the dict). A field a row
lacks is None.
"""


def _flatten(value, prefix, row):
    if prefix == "paradigm" and isinstance(value, dict) and "name" in value:
        row[prefix] = value["name"]  # a definition (rollout, confusion, sweep): its name, as in records
        return
    if isinstance(value, dict):
        for key, item in value.items():
            # The summary keys local mass by window size ("3"); a record lists {"k": 3, ...}.
            name = f"k{key}" if prefix.endswith("local") and str(key).isdigit() else str(key)
            _flatten(item, f"{prefix}_{name}" if prefix else name, row)
    elif isinstance(value, list):
        if value and all(isinstance(v, dict) and "k" in v for v in value):
            for v in value:
                _flatten({key: item for key, item in v.items() if key != "k"}, f"{prefix}_k{v['k']}", row)
        # other lists (singular values, curves, per-query maps) stay in the dict
    else:
        row[prefix] = value


def _rows(report, table):
    if table == "results":
        return [dict(r) for r in report.get("results", [])]
    if table in ("layers", "heads", "labels"):
        rows = []
        for per in report.get("summary", {}).get("per_paradigm", []):
            for entry in per.get(table, []):
                rows.append({"paradigm": per.get("paradigm"), **entry})
        return rows
    if table == "claims":
        return [dict(c) for c in report.get("claims", [])]
    raise ValueError(f"table must be 'results', 'layers', 'heads', 'labels' or 'claims', got {table!r}")


class Report(dict):
    """The JSON document of a long call as a dict, with records() and to_pandas()."""

    def records(self, table="results"):
        """The table as columns: {column: [value per row]} (see the module's docstring)."""
        flat = []
        for row in _rows(self, table):
            out = {}
            _flatten(row, "", out)
            flat.append(out)
        columns = []
        for row in flat:
            columns.extend(c for c in row if c not in columns)
        return {c: [row.get(c) for row in flat] for c in columns}

    def to_pandas(self, table="results"):
        """records(table) as a pandas.DataFrame."""
        try:
            import pandas
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError("Report.to_pandas needs pandas: install Debian's python3-pandas "
                                      "(report.records() gives the same columns without it)", name="pandas") from e
        return pandas.DataFrame(self.records(table))


def _returning_report(method):
    def call(*args, **kwargs):
        return Report(method(*args, **kwargs))
    call.__name__, call.__qualname__, call.__doc__ = method.__name__, method.__qualname__, method.__doc__
    return call


def install(dump_class):
    """Dump's long calls return a Report (still a dict: json.dumps and every key as before)."""
    for name in ("analyze", "claims", "sweep", "locality", "rollout"):
        setattr(dump_class, name, _returning_report(getattr(dump_class, name)))
