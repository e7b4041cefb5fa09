#!/usr/bin/env python3
"""p50 and p99 of sturnus_overhead_seconds between two /metrics scrapes, per alias and stream.

    curl -s http://127.0.0.1:4000/metrics >before.txt
    ... load ...
    curl -s http://127.0.0.1:4000/metrics >after.txt
    python3 bench/overhead.py before.txt after.txt
    python3 bench/overhead.py --json before.txt after.txt   # the busiest series as one JSON object

Quantiles are interpolated within buckets as Prometheus's histogram_quantile does, so they are
the figures the Grafana panel shows for the same window.
"""
import json
import re
import sys
from collections import defaultdict

SAMPLE = re.compile(r'^sturnus_overhead_seconds_(bucket|sum|count)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')


def read(path):
    """{(alias, stream): {"buckets": {le: count}, "sum": s, "count": n}}"""
    series = defaultdict(lambda: {"buckets": {}, "sum": 0.0, "count": 0.0})
    with open(path) as f:
        for line in f:
            m = SAMPLE.match(line.strip())
            if not m:
                continue
            labels = dict(LABEL.findall(m.group(2)))
            entry = series[(labels["alias"], labels["stream"])]
            value = float(m.group(3))
            if m.group(1) == "bucket":
                entry["buckets"][float(labels["le"])] = value
            else:
                entry[m.group(1)] = value
    return series


def quantile(q, buckets):
    """histogram_quantile over cumulative (le, count) pairs."""
    pairs = sorted(buckets.items())
    total = pairs[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in pairs:
        if count >= rank:
            if le == float("inf"):
                return lower_le
            if count == lower_count:
                return le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = le, count
    return pairs[-1][0]


def windows(before_path, after_path):
    """[(alias, stream, {"requests", "mean_us", "p50_us", "p99_us"})] for the series that
    counted requests between the two scrapes."""
    before, after = read(before_path), read(after_path)
    out = []
    for key in sorted(after):
        a, b = after[key], before.get(key, {"buckets": {}, "sum": 0.0, "count": 0.0})
        n = a["count"] - b["count"]
        if n <= 0:
            continue
        delta = {le: c - b["buckets"].get(le, 0.0) for le, c in a["buckets"].items()}
        p50, p99 = quantile(0.5, delta), quantile(0.99, delta)
        out.append((key[0], key[1], {
            "requests": int(n),
            "mean_us": (a["sum"] - b["sum"]) / n * 1e6,
            "p50_us": p50 * 1e6 if p50 is not None else None,
            "p99_us": p99 * 1e6 if p99 is not None else None,
        }))
    return out


def main():
    args = sys.argv[1:]
    as_json = args[:1] == ["--json"]
    if as_json:
        args = args[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    series = windows(*args)
    if as_json:
        busiest = max(series, key=lambda s: s[2]["requests"], default=None)
        print(json.dumps(dict(busiest[2], alias=busiest[0], stream=busiest[1]) if busiest else None))
        return
    for alias, stream, w in series:
        print(
            f"alias={alias} stream={stream} requests={w['requests']} mean_us={w['mean_us']:.0f} "
            f"p50_us={w['p50_us']:.0f} p99_us={w['p99_us']:.0f}"
        )


if __name__ == "__main__":
    main()
