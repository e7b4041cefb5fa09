#!/usr/bin/env python3
"""Helpers for bench/run.sh (standard library only).

  bench.py bodies DIR            write the request bodies (chat, stream, big) into DIR
  bench.py summarise RAW OUTDIR  turn the run's raw JSON lines into OUTDIR/latest.{json,md}
"""

import json
import os
import sys

TARGETS = ["direct", "passthrough", "nginx", "sturnus", "sturnus-auth", "passthrough-2t", "sturnus-2t"]
TARGET_NAMES = {
    "direct": "direct (mock)",
    "passthrough": "Pingora pass-through",
    "nginx": "nginx",
    "sturnus": "sturnus",
    "sturnus-auth": "sturnus, auth on",
    "passthrough-2t": "Pingora pass-through, 2 threads",
    "sturnus-2t": "sturnus, 2 threads",
}
# Each sturnus variant against the pass-through of the same thread count, same rounds.
PAIRS = [
    ("sturnus", "passthrough", "auth off"),
    ("sturnus-auth", "passthrough", "auth on"),
    ("sturnus-2t", "passthrough-2t", "2 threads"),
]
# The most resident memory one idle keep-alive client may add to sturnus, in KiB.
IDLE_KIB_PER_CLIENT = 10


def bodies(out_dir):
    """~1 KB chat bodies (plain and streaming) and a 256 KiB one, model alias "bench"."""
    os.makedirs(out_dir, exist_ok=True)

    def chat(size, stream):
        base = {
            "model": "bench",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": ""},
            ],
            "temperature": 0.2,
            "max_tokens": 64,
        }
        if stream:
            base["stream"] = True
        filler = "The quick brown fox jumps over the lazy dog. "
        empty = len(json.dumps(base, separators=(", ", ": ")).encode())
        need = max(0, size - empty)
        text = (filler * (need // len(filler) + 1))[:need]
        base["messages"][1]["content"] = text
        return json.dumps(base, separators=(", ", ": ")).encode()

    files = {
        "chat.json": chat(1024, False),
        "stream.json": chat(1024, True),
        "big.json": chat(256 * 1024, False),
    }
    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)


def load_raw(path):
    """Raw records: machine/load notes, memory samples, idle-client samples and one record per
    (scenario, target, round)."""
    machine, memory, runs, loads, idle = {}, {}, {}, [], {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            kind = rec.get("kind")
            if kind == "machine":
                machine = rec
            elif kind == "memory":
                memory.setdefault(rec["target"], {})[rec["when"]] = rec
            elif kind == "loadavg":
                loads.append(rec)
            elif kind == "idle":
                idle[rec["target"]] = rec
            elif kind == "run":
                runs.setdefault(rec["scenario"], {}).setdefault(rec["target"], []).append(rec)
    return machine, memory, runs, loads, idle


def idle_figures(rec):
    """Memory per idle keep-alive client of one proxy: RSS added ÷ clients held."""
    held = rec.get("held") or {}
    clients = held.get("clients", 0)
    added = rec["rss_after_kb"] - rec["rss_before_kb"]
    return {
        "clients": clients,
        "failed": held.get("failed", 0),
        "open_seconds": held.get("open_seconds"),
        "rss_before_mb": rec["rss_before_kb"] / 1024,
        "rss_after_mb": rec["rss_after_kb"] / 1024,
        "peak_rss_mb": rec.get("hwm_kb", 0) / 1024,
        "kib_per_client": added / clients if clients else None,
    }


def metrics(rec, clk_tck):
    """Normalises one wrk or ttfc_client result into the figures the table shows."""
    load = rec.get("load") or {}
    if "latency_us" in load:  # wrk
        requests = load["requests"]
        seconds = load["duration_us"] / 1e6
        lat = load["latency_us"]
        errs = sum(load["errors"].values())
        ttfc = None
    else:  # ttfc_client
        requests = load.get("requests", 0)
        seconds = load.get("seconds", 0) or 1e-9
        lat = load.get("total_us", {})
        errs = load.get("errors", 0) + load.get("non_2xx", 0)
        ttfc = load.get("ttfc_us")
    wall = rec.get("wall_s") or seconds
    cpu_s = rec.get("proxy_ticks", 0) / clk_tck
    mock_s = rec.get("mock_ticks", 0) / clk_tck
    core_s = rec.get("proxy_core_ticks", 0) / clk_tck
    # Work on the proxy core that was not the proxy's: other processes of the shared machine.
    other_s = core_s if rec["target"] == "direct" else max(0.0, core_s - cpu_s)
    m = {
        "round": rec.get("round"),
        "requests": requests,
        "errors": errs,
        "rps": requests / seconds if seconds else 0.0,
        "p50_ms": lat.get("p50", 0) / 1000,
        "p99_ms": lat.get("p99", 0) / 1000,
        "mean_ms": lat.get("mean", 0) / 1000,
        "cpu_s_per_10k": (cpu_s / requests * 10_000) if requests and rec["target"] != "direct" else None,
        # What the proxy would serve with a whole core to itself at this CPU cost per request.
        "rps_per_core": (requests / cpu_s) if cpu_s and rec["target"] != "direct" else None,
        "proxy_cpu_pct": (100 * cpu_s / wall) if rec["target"] != "direct" else None,
        "mock_cpu_pct": 100 * mock_s / wall if wall else None,
        "other_on_proxy_core_pct": 100 * other_s / wall if wall else None,
    }
    own = rec.get("overhead") or {}
    for q in ("p50", "p99"):
        if own.get(f"{q}_us") is not None:
            m[f"own_{q}_ms"] = own[f"{q}_us"] / 1000
    if ttfc is not None:
        m["ttfc_p50_ms"] = ttfc.get("p50", 0) / 1000
        m["ttfc_p99_ms"] = ttfc.get("p99", 0) / 1000
    return m


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def nearest_rank(sorted_values, p):
    """Percentile by nearest rank, as ttfc_client computes it (None when empty)."""
    if not sorted_values:
        return None
    rank = -(-p * len(sorted_values) // 100)
    return sorted_values[min(max(int(rank), 1), len(sorted_values)) - 1]


def pooled_ttfc(records):
    """Time-to-first-chunk p99 over every round's requests together.

    One round's p99 is its slowest one or two requests; pooling the rounds puts several
    hundred samples under the tail percentile."""
    samples = sorted(v for r in records for v in (r.get("load") or {}).get("ttfc_samples_us", []))
    if not samples:
        return {}
    return {
        "ttfc_pooled_samples": len(samples),
        "ttfc_pooled_p99_ms": nearest_rank(samples, 99) / 1000,
    }


def combine(rounds):
    """Median of every figure over the rounds of one (scenario, target)."""
    keys = {k for r in rounds for k in r} - {"round"}
    out = {k: median([r.get(k) for r in rounds]) for k in keys}
    out["errors"] = sum(r.get("errors", 0) for r in rounds)
    out["requests"] = sum(r.get("requests", 0) for r in rounds)
    out["rounds"] = rounds
    return out


def fmt(v, digits=2):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def summarise(raw_path, out_dir):
    machine, memory, runs, loads, idle = load_raw(raw_path)
    clk = float(machine.get("clk_tck", 100))
    scenarios = machine.get("scenarios", [])
    result = {"machine": machine, "loadavg": loads, "scenarios": {}, "memory": {}, "checks": [],
              "idle_clients": {t: idle_figures(r) for t, r in idle.items()}}

    for sc in scenarios:
        name = sc["name"]
        per = {}
        for t in TARGETS:
            if t in runs.get(name, {}):
                per[t] = combine([metrics(r, clk) for r in runs[name][t]])
                per[t].update(pooled_ttfc(runs[name][t]))
        direct = per.get("direct")
        for t, m in per.items():
            if direct and t != "direct":
                m["added_p50_ms"] = m["p50_ms"] - direct["p50_ms"]
                m["added_p99_ms"] = m["p99_ms"] - direct["p99_ms"]
                if "ttfc_p99_ms" in m:
                    m["added_ttfc_p50_ms"] = m["ttfc_p50_ms"] - direct["ttfc_p50_ms"]
                    m["added_ttfc_p99_ms"] = m["ttfc_p99_ms"] - direct["ttfc_p99_ms"]
        result["scenarios"][name] = {"description": sc["description"], "targets": per}

    for t, whens in memory.items():
        result["memory"][t] = {
            "idle_rss_mb": whens.get("idle", {}).get("rss_kb", 0) / 1024,
            "peak_rss_mb": whens.get("end", {}).get("hwm_kb", 0) / 1024,
            "end_rss_mb": whens.get("end", {}).get("rss_kb", 0) / 1024,
        }

    result["checks"] = checks(result)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "latest.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    md = markdown(result)
    with open(os.path.join(out_dir, "latest.md"), "w") as f:
        f.write(md)
    print(md)


def per_round(result, scenario, target):
    """The figures of each round of one (scenario, target), by round number."""
    rounds = result["scenarios"].get(scenario, {}).get("targets", {}).get(target, {}).get("rounds", [])
    return {r["round"]: r for r in rounds}


def paired(result, scenario, key, a, b, op):
    """`op(a's figure, b's figure)` for each round both ran, then the median and the range.

    Pairing by round cancels what drifts between rounds on a shared machine (other tenants,
    frequency): the two proxies of one round ran back to back.
    """
    ra, rb = per_round(result, scenario, a), per_round(result, scenario, b)
    values = []
    for n in sorted(set(ra) & set(rb)):
        x, y = ra[n].get(key), rb[n].get(key)
        if x is not None and y is not None and (op is not ratio_of or y):
            values.append(op(x, y))
    if not values:
        return None, None
    return median(values), (min(values), max(values))


def ratio_of(x, y):
    return x / y


def difference(x, y):
    return x - y


def checks(result):
    """The issue's targets for sturnus, against the Pingora pass-through (or the direct
    connection) in the same rounds of one run: the median over rounds of the per-round figure."""
    mem = result["memory"].get("sturnus", {})
    out = []

    def add(what, measured, target_text, ok, unit=""):
        value, spread = measured if isinstance(measured, tuple) else (measured, None)
        out.append({
            "check": what,
            "measured": value,
            "range": list(spread) if spread else None,
            "target": target_text,
            "pass": bool(ok(value)) if value is not None else None,
            "unit": unit,
        })

    def vs_passthrough(scenario, key, op=ratio_of):
        return paired(result, scenario, key, "sturnus", "passthrough", op)

    at_least = lambda bound: (lambda v: v >= bound)  # noqa: E731
    at_most = lambda bound: (lambda v: v <= bound)  # noqa: E731
    for variant, base, label in PAIRS:
        if not per_round(result, "chat", variant):
            continue
        add(f"non-streaming RPS, {label}: {variant} ÷ {base} (c=64)",
            paired(result, "chat", "rps", variant, base, ratio_of), "≥ 0.95", at_least(0.95), "×")
        add(f"non-streaming CPU per request, {label}: {variant} ÷ {base}",
            paired(result, "chat", "cpu_s_per_10k", variant, base, ratio_of), "≤ 1.05",
            at_most(1.05), "×")
    for scen, label in (("latency", "c=1"), ("chat", "c=64")):
        add(f"added p99 latency, sturnus − pass-through ({label})",
            vs_passthrough(scen, "p99_ms", difference), "≤ 0.30 ms", at_most(0.3), "ms")
    add("streaming RPS, sturnus ÷ pass-through (c=64, 20 chunks)", vs_passthrough("stream", "rps"),
        "≥ 0.90", at_least(0.9), "×")
    add("streaming RPS per proxy CPU second, sturnus ÷ pass-through",
        vs_passthrough("stream", "rps_per_core"), "≥ 0.90", at_least(0.9), "×")
    def pooled_ttfc_p99(target, base):
        """Pooled p99 of `target` minus `base`'s, with the rounds' own differences as the range."""
        per = result["scenarios"].get("ttfc", {}).get("targets", {})
        a = per.get(target, {}).get("ttfc_pooled_p99_ms")
        b = per.get(base, {}).get("ttfc_pooled_p99_ms")
        _, spread = paired(result, "ttfc", "ttfc_p99_ms", target, base, difference)
        return (a - b if a is not None and b is not None else None), spread

    add("time-to-first-chunk overhead p99 vs direct (c=16, all rounds' requests pooled)",
        pooled_ttfc_p99("sturnus", "direct"), "≤ 1.00 ms", at_most(1.0), "ms")
    add("time-to-first-chunk p99, sturnus − pass-through (c=16, all rounds' requests pooled)",
        pooled_ttfc_p99("sturnus", "passthrough"), "≤ 1.00 ms", at_most(1.0), "ms")
    add("idle RSS", mem.get("idle_rss_mb"), "≤ 15 MB", at_most(15), "MB")
    add("peak RSS after all scenarios", mem.get("peak_rss_mb"), "≤ 64 MB", at_most(64), "MB")
    for t in ("sturnus", "sturnus-auth"):
        held = result["idle_clients"].get(t)
        if held:
            add(f"RSS per idle keep-alive client, {TARGET_NAMES[t]} ({held['clients']:,} clients)",
                held["kib_per_client"], f"≤ {IDLE_KIB_PER_CLIENT} KiB", at_most(IDLE_KIB_PER_CLIENT),
                "KiB")
    return out


def markdown(result):
    m = result["machine"]
    lines = [
        "# sturnus proxy benchmark",
        "",
        f"Run {m.get('date', '?')} on `{m.get('cpu', '?')}`, {m.get('nproc', '?')} cores, "
        f"Linux {m.get('kernel', '?')}; {m.get('load_tool', '?')}, nginx {m.get('nginx', '?')}, "
        f"Pingora 0.9.1, sturnus {m.get('commit', '?')}.",
        f"Load tool and mock provider pinned to core {m.get('client_core', '?')}, proxies to core "
        f"{m.get('proxy_core', '?')}; each proxy runs one worker thread, except the 2-thread rows (their "
        f"two threads share that core). {m.get('seconds', '?')} s measured "
        f"per run after {m.get('warmup', '?')} s of warm-up, {m.get('rounds', 1)} rounds with the targets "
        f"interleaved (the pass-through and sturnus back to back); every figure in the tables below is the "
        f"median over the rounds. All traffic on 127.0.0.1.",
    ]
    loads = result.get("loadavg", [])
    if loads:
        text = ", ".join(f"{l['when']} {l['value']}" for l in loads)
        lines.append(f"Load average (1/5/15 min) on the shared machine: {text}.")
    lines.append("")
    lines.append("Added latency is the target's percentile minus the direct connection's in the same "
                 "scenario. CPU is the proxy process's user+system time (all threads; nginx: master "
                 "and worker) from /proc; \"others on proxy core\" is the busy time of the proxy's core "
                 "that belonged to other processes of the shared machine during the run (with the "
                 "direct target: all of it), the share the proxy could not use. \"RPS per proxy core\" is "
                 "requests ÷ proxy CPU seconds: what the proxy would serve with a whole core, the "
                 "figure least disturbed by other load.")
    lines.append("")

    lines.append("## Targets (sturnus against the Pingora pass-through, same run)")
    lines.append("")
    lines.append("Each check is computed per round (the pass-through and sturnus ran back to back, in "
                 "alternating order) and the median over the rounds is judged; the range shows the "
                 "rounds' spread. The time-to-first-chunk checks are the exception: one round's p99 is "
                 "its slowest one or two requests, so they judge the p99 of every round's requests "
                 "pooled per target, and the range shows the per-round differences.")
    lines.append("")
    lines.append("| check | measured | range over rounds | target | met |")
    lines.append("|---|---|---|---|---|")
    for c in result["checks"]:
        v = c["measured"]
        shown = "—" if v is None else f"{v:.2f} {c['unit']}".strip()
        spread = c.get("range")
        spread = "—" if not spread else f"{spread[0]:.2f} – {spread[1]:.2f}"
        met = {True: "yes", False: "**no**", None: "—"}[c["pass"]]
        lines.append(f"| {c['check']} | {shown} | {spread} | {c['target']} | {met} |")
    lines.append("")

    lines += gateway_overhead(result)

    for name, sc in result["scenarios"].items():
        lines.append(f"## {name}: {sc['description']}")
        lines.append("")
        per = sc["targets"]
        has_ttfc = any("ttfc_p99_ms" in v for v in per.values())
        head = ["target", "RPS", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms"]
        if has_ttfc:
            head += ["TTFC p50 ms", "TTFC p99 ms", "added TTFC p99 ms", "TTFC p99 pooled ms",
                     "pooled samples"]
        head += ["proxy CPU s / 10k req", "RPS per proxy core", "proxy CPU %", "mock CPU %",
                 "others on proxy core %", "errors"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for t in TARGETS:
            v = per.get(t)
            if v is None:
                continue
            row = [TARGET_NAMES[t], fmt(v["rps"], 0), fmt(v["p50_ms"]), fmt(v["p99_ms"]),
                   fmt(v.get("added_p50_ms")), fmt(v.get("added_p99_ms"))]
            if has_ttfc:
                row += [fmt(v.get("ttfc_p50_ms")), fmt(v.get("ttfc_p99_ms")),
                        fmt(v.get("added_ttfc_p99_ms")), fmt(v.get("ttfc_pooled_p99_ms")),
                        fmt(v.get("ttfc_pooled_samples"))]
            row += [fmt(v["cpu_s_per_10k"], 3), fmt(v["rps_per_core"], 0), fmt(v["proxy_cpu_pct"], 0),
                    fmt(v["mock_cpu_pct"], 0), fmt(v.get("other_on_proxy_core_pct"), 0),
                    fmt(v["errors"])]
            lines.append("| " + " | ".join(row) + " |")
        pt, ng = per.get("passthrough"), per.get("nginx")
        notes = []
        for variant, base, label in PAIRS:
            st, bt = per.get(variant), per.get(base)
            if not (st and bt):
                continue
            if bt.get("rps_per_core") and st.get("rps_per_core"):
                notes.append(f"{variant} ÷ {base} RPS per proxy core "
                             f"{st['rps_per_core'] / bt['rps_per_core']:.2f}")
            if bt["rps"]:
                notes.append(f"{variant} ÷ {base} RPS {st['rps'] / bt['rps']:.2f}")
            if bt.get("cpu_s_per_10k") and st.get("cpu_s_per_10k"):
                notes.append(f"{variant} ÷ {base} CPU/req {st['cpu_s_per_10k'] / bt['cpu_s_per_10k']:.2f}")
        if pt and ng and ng["rps"]:
            notes.append(f"pass-through ÷ nginx RPS {pt['rps'] / ng['rps']:.2f}")
        if pt and ng and ng.get("cpu_s_per_10k") and pt.get("cpu_s_per_10k"):
            notes.append(f"pass-through ÷ nginx CPU/req {pt['cpu_s_per_10k'] / ng['cpu_s_per_10k']:.2f}")
        if notes:
            lines.append("")
            lines.append("Ratios: " + "; ".join(notes) + ".")
        lines.append("")

    lines += idle_table(result)

    lines.append("## Memory of each proxy")
    lines.append("")
    lines.append("| proxy | idle RSS MB | peak RSS MB (VmHWM) | RSS at the end MB |")
    lines.append("|---|---|---|---|")
    for t in TARGETS:
        v = result["memory"].get(t)
        if v:
            lines.append(f"| {TARGET_NAMES[t]} | {v['idle_rss_mb']:.1f} | {v['peak_rss_mb']:.1f} | "
                         f"{v['end_rss_mb']:.1f} |")
    lines.append("")
    return "\n".join(lines)


def idle_table(result):
    """Memory per idle keep-alive client of each proxy."""
    idle = result.get("idle_clients") or {}
    if not idle:
        return []
    n = result["machine"].get("idle_clients", "?")
    lines = [
        "## Idle keep-alive clients",
        "",
        f"Each proxy restarted, warmed up with 1 s of wrk at 64 connections, then {n:,} clients "
        "(bench/idle.py) each sent one non-streaming request, read its answer and stayed connected. "
        "RSS before is read after the warm-up, RSS with clients 2 s after the last answer; per client "
        "is the difference ÷ clients held.",
        "",
        "| proxy | clients held | failed | RSS before MB | RSS with clients MB | peak RSS MB | KiB per client |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in TARGETS:
        v = idle.get(t)
        if v:
            lines.append(f"| {TARGET_NAMES[t]} | {v['clients']:,} | {v['failed']:,} | "
                         f"{v['rss_before_mb']:.1f} | {v['rss_after_mb']:.1f} | {v['peak_rss_mb']:.1f} | "
                         f"{fmt(v['kib_per_client'], 1)} |")
    lines.append("")
    return lines


def gateway_overhead(result):
    """sturnus's own account of the time it adds (`sturnus_overhead_seconds`, scraped before and
    after each measured run) next to what the clients measured (sturnus's percentile minus the
    direct connection's, and minus the pass-through's)."""
    rows = []
    for name, sc in result["scenarios"].items():
        per = sc["targets"]
        st, direct, pt = per.get("sturnus"), per.get("direct"), per.get("passthrough")
        if not st or st.get("own_p50_ms") is None:
            continue
        row = [name]
        for q in ("p50", "p99"):
            over_pt = st[f"{q}_ms"] - pt[f"{q}_ms"] if pt else None
            row += [fmt(st.get(f"own_{q}_ms"), 3), fmt(st.get(f"added_{q}_ms"), 3), fmt(over_pt, 3)]
        rows.append("| " + " | ".join(row) + " |")
    if not rows:
        return []
    return [
        "## Gateway overhead: sturnus's own figure against the clients'",
        "",
        "`sturnus_overhead_seconds` counts the time sturnus itself adds to a request (end of the "
        "request body to the request leaving for the provider, plus the provider's response header "
        "to the first write to the client); it is scraped from `/metrics` before and after each "
        "measured run and its p50/p99 over the run are interpolated within buckets as Prometheus "
        "does (median over the rounds). Next to it, what the clients measured: sturnus's latency "
        "percentile minus the direct connection's (which also counts the second connection hop and "
        "queueing on the proxy core), and minus the pass-through's.",
        "",
        "| scenario | own p50 ms | added p50 vs direct ms | p50 over pass-through ms | own p99 ms | "
        "added p99 vs direct ms | p99 over pass-through ms |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main(argv):
    if len(argv) == 3 and argv[1] == "bodies":
        bodies(argv[2])
    elif len(argv) == 4 and argv[1] == "summarise":
        summarise(argv[2], argv[3])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
