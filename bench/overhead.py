#!/usr/bin/env python3
"""p50 and p99 of sturnus_overhead_seconds between two /metrics scrapes, per alias and stream.

    curl -s http://127.0.0.1:4000/metrics >before.txt
    ... load ...
    curl -s http://127.0.0.1:4000/metrics >after.txt
    python3 bench/overhead.py before.txt after.txt

Quantiles are interpolated within buckets as Prometheus's histogram_quantile does, so they are
the figures the Grafana panel shows for the same window.
"""
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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = read(sys.argv[1]), read(sys.argv[2])
    for key in sorted(after):
        a, b = after[key], before.get(key, {"buckets": {}, "sum": 0.0, "count": 0.0})
        n = a["count"] - b["count"]
        if n <= 0:
            continue
        delta = {le: c - b["buckets"].get(le, 0.0) for le, c in a["buckets"].items()}
        p50, p99 = quantile(0.5, delta), quantile(0.99, delta)
        mean = (a["sum"] - b["sum"]) / n
        print(
            f"alias={key[0]} stream={key[1]} requests={int(n)} mean_us={mean * 1e6:.0f} "
            f"p50_us={p50 * 1e6:.0f} p99_us={p99 * 1e6:.0f}"
        )


if __name__ == "__main__":
    main()
