"""The figures of docs/scaling.md, computed from the fleet benchmark's own runs (#56: every
figure on that page is written by the script that measured it).

  fleet_summary.py fleet FLEET.jsonl DIRECT.jsonl ANCHOR.jsonl
      the `fleet` part's runs -> section `fleet-summary` of docs/scaling.md
  fleet_summary.py large LARGE.jsonl DIRECT.jsonl
      the `fleet-large` part's runs -> section `fleet-large` of docs/scaling.md and of
      docs/benchmarks.md

Each input holds one JSON object per line, as `e2e/examples/fleet_bench.rs` prints them.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_section  # noqa: E402


def load(path):
    if not path or not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def span(values, fmt="{:.1f}", unit=""):
    """`lo–hi unit` (or one value), and the median when there are three or more."""
    values = sorted(values)
    if not values:
        return "—"
    lo, hi = fmt.format(values[0]), fmt.format(values[-1])
    text = (lo if lo == hi else f"{lo}–{hi}") + unit
    if len(values) >= 3 and lo != hi:
        text += f" (median {fmt.format(statistics.median(values))})"
    return text


def plane_alone(direct):
    """(client limit, size) -> the medians of the plane alone, per round."""
    out = {}
    for key in sorted({(r["controller_manager_qps"], r["layers"]) for r in direct}):
        rs = [r for r in direct if (r["controller_manager_qps"], r["layers"]) == key]
        out[key] = {rnd: statistics.median(r[f"{rnd}_floor_seconds"] for r in rs)
                    for rnd in ("create", "upgrade")}
        out[key]["runs"] = len(rs)
    return out


def ratio(r, alone, rnd):
    """A run's `rnd` round over the plane alone's at its size and client limit (None without)."""
    base = alone.get((r["controller_manager_qps"], r["layers"]), {}).get(rnd)
    return r[f"{rnd}_to_all_deployed_seconds"] / base if base else None


def ratios(rs, alone, rnd):
    return [x for x in (ratio(r, alone, rnd) for r in rs) if x is not None]


def own_cpu_ms(r, rnd, name):
    return 1000 * (r.get(f"cpu_seconds_{rnd}") or {}).get(name, 0.0) / r["layers"]


def fleet(fleet_path, direct_path, anchor_path):
    runs, direct, anchor = load(fleet_path), load(direct_path), load(anchor_path)
    alone = plane_alone(direct)
    single = [r for r in runs if r.get("shards", 1) == 1]
    qpss = sorted({r["controller_manager_qps"] for r in single})
    lines = []
    for qps in qpss:
        sizes = sorted({r["layers"] for r in single if r["controller_manager_qps"] == qps})
        at = {n: [r for r in single if r["controller_manager_qps"] == qps and r["layers"] == n] for n in sizes}
        head = "| kube-controller-manager client limit " + str(qps) + " | " + " | ".join(f"{n:,} layers" for n in sizes) + " |"
        lines += ["", head, "|---|" + "---:|" * len(sizes)]
        row = lambda label, cell: lines.append(f"| {label} | " + " | ".join(cell(at[n], n) for n in sizes) + " |")
        row("runs (each on a fresh plane)", lambda rs, n: str(len(rs)))
        row("plane alone, create / upgrade (median)", lambda rs, n: (
            f"{alone[(qps, n)]['create']:.1f} / {alone[(qps, n)]['upgrade']:.1f} s ({alone[(qps, n)]['runs']} runs)"
            if (qps, n) in alone else "—"))
        row("create, all Deployed", lambda rs, n: span([r["create_to_all_deployed_seconds"] for r in rs], unit=" s"))
        row("create ÷ plane alone", lambda rs, n: span(ratios(rs, alone, "create"), "{:.2f}", "×"))
        row("upgrade, all Deployed", lambda rs, n: span([r["upgrade_to_all_deployed_seconds"] for r in rs], unit=" s"))
        row("upgrade ÷ plane alone", lambda rs, n: span(ratios(rs, alone, "upgrade"), "{:.2f}", "×"))
        row("controller peak RSS", lambda rs, n: span([r["controller_peak_rss_kib"] / 1024 for r in rs], unit=" MiB"))
        row("growth per layer, (peak − idle) / N", lambda rs, n: span(
            [(r["controller_peak_rss_kib"] - r["controller_idle_rss_kib"]) / n for r in rs], unit=" KiB"))
        row("controller peak sockets", lambda rs, n: span([r["controller_peak_sockets"] for r in rs], "{:.0f}"))
        row("controller CPU per layer, create / upgrade", lambda rs, n: (
            span([own_cpu_ms(r, "create", "layer-controller") for r in rs], unit=" ms") + " / "
            + span([own_cpu_ms(r, "upgrade", "layer-controller") for r in rs], unit=" ms")))
        obs = lambda rs: [r["observer"] for r in rs if r.get("observer")]
        row("drift-observer start-up sync", lambda rs, n: span([o["sync_seconds"] for o in obs(rs)], unit=" s"))
        row("drift-observer peak RSS", lambda rs, n: span([o["peak_rss_kib"] / 1024 for o in obs(rs)], unit=" MiB"))
        row("drift-observer peak sockets", lambda rs, n: span([o["peak_sockets"] for o in obs(rs)], "{:.0f}"))
    # What the rows say, computed.
    said = []
    for qps in qpss:
        rs = [r for r in single if r["controller_manager_qps"] == qps]
        n_max = max(r["layers"] for r in rs)
        big = [r for r in rs if r["layers"] == n_max]
        for rnd in ("create", "upgrade"):
            rt = ratios(big, alone, rnd)
            if not rt:
                continue
            gap = statistics.median(r[f"{rnd}_floor_seconds"] - r[f"{rnd}_deployments_applied_seconds"] for r in big)
            m = statistics.median(rt)
            pace = ("the last Deployment reached the API server within a second of kube-controller-manager "
                    "finishing, so the deployer's applies set the pace" if gap < 1.0 else
                    f"the last Deployment reached the API server {gap:.1f} s before kube-controller-manager "
                    "finished, so kube-controller-manager's own work set the pace")
            said.append(f"At {n_max:,} layers and client limit {qps}, the {rnd} round took {m:.2f}× the plane "
                        f"alone (median of {len(rt)}; #56's goal is ≤ 1.1×: "
                        f"{'met' if m <= 1.1 else 'not met'}); in the median run {pace}.")
        growth = [(r["controller_peak_rss_kib"] - r["controller_idle_rss_kib"]) / r["layers"] for r in big]
        idle = statistics.median(r["controller_idle_rss_kib"] for r in big) / 1024
        g = statistics.median(growth)
        said.append(f"Memory: an idle controller holds {idle:.0f} MiB and each layer adds {g:.0f} KiB "
                    f"(median at {n_max:,} layers); by that line 10,000 layers would need "
                    f"{idle + 10000 * g / 1024:.0f} MiB (a projection from these rows: the `fleet-large` "
                    "section below measures it).")
        socks = [r["controller_peak_sockets"] for r in rs]
        said.append(f"Connections: the controller's peak sockets stayed between {min(socks)} and {max(socks)} "
                    f"from {min(r['layers'] for r in rs):,} to {n_max:,} layers.")
    shard_runs = [r for r in runs if r.get("shards", 1) > 1]
    if shard_runs:
        s = shard_runs[0]["shards"]
        said.append(f"{s} shards at {shard_runs[0]['layers']:,} layers (one controller each, sums): create "
                    f"{span([r['create_to_all_deployed_seconds'] for r in shard_runs], unit=' s')} "
                    f"({span(ratios(shard_runs, alone, 'create'), '{:.2f}', '×')} the plane alone), peak RSS "
                    f"{span([r['controller_peak_rss_kib'] / 1024 for r in shard_runs], unit=' MiB')}, peak sockets "
                    f"{span([r['controller_peak_sockets'] for r in shard_runs], '{:.0f}')}.")
    if anchor:
        n = max(r["layers"] for r in anchor)
        ours = [r for r in single if r["layers"] == n]
        for args in sorted({r.get("anchor_args", "") for r in anchor}):
            theirs = [r for r in anchor if r.get("anchor_args", "") == args and r["layers"] == n]
            med = lambda rs, k: statistics.median(r[k] for r in rs)
            limit = f"client limit `{args}`" if args else "its client limit as shipped"
            said.append(
                f"Flux's kustomize-controller ({os.environ.get('BENCH_FLEET_ANCHOR_VERSION') or 'version unknown'}, "
                f"{limit}), {n:,} apps, {len(theirs)} runs: create "
                f"{span([r['create_to_all_deployed_seconds'] for r in theirs], unit=' s')} "
                f"({span(ratios(theirs, alone, 'create'), '{:.2f}', '×')} the plane alone), upgrade "
                f"{span([r['upgrade_to_all_deployed_seconds'] for r in theirs], unit=' s')}, peak RSS "
                f"{span([r['controller_peak_rss_kib'] / 1024 for r in theirs], unit=' MiB')}, its own CPU per app "
                f"{span([own_cpu_ms(r, 'create', 'kustomize-controller') for r in theirs], unit=' ms')} in the create round"
                + (f" (Strata's layer-controller: {span([own_cpu_ms(r, 'create', 'layer-controller') for r in ours], unit=' ms')}; "
                   f"create medians Strata / Flux {med(ours, 'create_to_all_deployed_seconds') / med(theirs, 'create_to_all_deployed_seconds'):.2f})"
                   if ours else "") + ".")
    sizes = " ".join(str(n) for n in sorted({r["layers"] for r in single}))
    qps_text = " ".join(str(q) for q in qpss)
    body = f"""
Command: `BENCH_ONLY=fleet BENCH_FLEET_SIZES="{sizes}" BENCH_FLEET_QPS="{qps_text}" bench/run.sh` (the
sizes and client limits of these runs; Flux's kustomize-controller beside it with
`ANCHOR_KUSTOMIZE_CONTROLLER_BIN=<path>`, a binary built by hand outside this repository), written by
`bench/fleet_summary.py` from the same runs as the *fleet* section of `docs/benchmarks.md`
(which has every run, the API server's requests and the CPU by process). The plane alone is
the same apps applied by the benchmark itself with no deployer (`BENCH_FLEET_DIRECT=1`), in
the same run; times are medians (ranges where they vary).
{chr(10).join(lines)}

{chr(10).join(f"- {s}" for s in said)}
"""
    docs_section.write("fleet-summary", body, "docs/scaling.md")


def controller_flags(args):
    # The flags a run gave the layer-controller beyond the ones every run passes (its selector,
    # the source namespace, no leader election), as written in its result.
    words, kept, skip = args.split(), [], False
    for w in words:
        if skip:
            skip = False
        elif w in ("--layer-selector", "--default-source-namespace"):
            skip = True
        elif w != "--leader-elect=false":
            kept.append(w)
    return " ".join(kept)


def large(large_path, direct_path):
    runs, direct = load(large_path), load(direct_path)
    alone = plane_alone(direct)
    lines, said = [], []
    for r in runs:
        n = r["layers"]
        a = alone.get((r["controller_manager_qps"], n))
        for rnd in ("create", "upgrade"):
            ratio = r[f"{rnd}_to_all_deployed_seconds"] / a[rnd] if a else None
            lines.append(
                f"| {n:,} | {r['controller_manager_qps']} | {rnd} | {a[rnd]:.1f} s | "
                f"{r[f'{rnd}_to_all_deployed_seconds']:.1f} s | {r[f'{rnd}_deployments_applied_seconds']:.1f} s | "
                f"{ratio:.2f}× | {own_cpu_ms(r, rnd, 'layer-controller'):.1f} ms |" if a else
                f"| {n:,} | {r['controller_manager_qps']} | {rnd} | — | {r[f'{rnd}_to_all_deployed_seconds']:.1f} s | — | — | — |")
        peak = r["controller_peak_rss_kib"] / 1024
        said.append(f"{n:,} layers ({4 * n:,} objects): controller peak RSS {peak:.1f} MiB "
                    f"({'within' if peak <= 128 else 'over'} #56's 128 MiB), "
                    f"{(r['controller_peak_rss_kib'] - r['controller_idle_rss_kib']) / n:.1f} KiB per layer over "
                    f"{r['controller_idle_rss_kib'] / 1024:.0f} MiB idle; sockets: peak {r['controller_peak_sockets']}, "
                    f"{r['controller_sockets_at_end']} at the end.")
        after = r.get("controller_rss_after_create_kib")
        recs = [f"{r[k]:.2f} ({rnd})" for rnd, k in (("create", "reconciles_per_layer_create"),
                                                 ("upgrade", "reconciles_per_layer_upgrade")) if k in r]
        if after or recs:
            rss = f"The controller's RSS after the create round {after / 1024:.1f} MiB; " if after else ""
            said.append(rss + f"reconciles per layer {', '.join(recs) if recs else 'not recorded'}.")
        flags = controller_flags(r.get("controller_args", ""))
        sent = [f"{r[k]:.2f} in the {rnd} round" for rnd, k in (("create", "applied_objects_per_layer_create"),
                                                             ("upgrade", "applied_objects_per_layer_upgrade")) if k in r]
        said.append(f"The layer-controller ran with {'`' + flags + '`' if flags else 'its default flags'}; "
                    f"objects applied per layer (of 4): {', '.join(sent) if sent else 'not recorded'}.")
        cpu = r.get("cpu_seconds_create") or {}
        if cpu:
            by = ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 0.5)
            said.append(f"CPU-seconds in the layer-controller's create round, by process: {by} "
                        f"({sum(cpu.values()) / r['create_to_all_deployed_seconds']:.2f} of the 2 cores busy).")
        if a:
            worst = max(r[f"{rnd}_to_all_deployed_seconds"] / a[rnd] for rnd in ("create", "upgrade"))
            said.append(f"Time: at most {worst:.2f}× the plane alone over both rounds "
                        f"({'within' if worst <= 1.2 else 'over'} #56's 1.2×).")
    for d in direct:
        said.append(f"The plane alone at {d['layers']:,} apps: the last object applied at "
                    f"{d['create_applied_seconds']:.1f} s, every Deployment observed at {d['create_floor_seconds']:.1f} s "
                    f"(create); {d['upgrade_applied_seconds']:.1f} / {d['upgrade_floor_seconds']:.1f} s (upgrade); "
                    f"all processes used {sum((d.get('cpu_seconds_create') or {}).values()):.0f} CPU-s in its create round.")
    body = f"""
## The fleet at 10,000 layers

Command: `BENCH_ONLY=fleet-large bench/run.sh` (`BENCH_FLEET_LARGE_SIZE`, default 10000;
`BENCH_FLEET_LARGE_QPS`, default 200): one run of the plane alone and one of the
layer-controller (release build, no drift-observer; its flags are below), each on a fresh
plane, the apps as in the *fleet* section. Written by `bench/fleet_summary.py`.

| layers | KCM QPS | round | plane alone | layer-controller | its last Deployment applied | ÷ plane alone | controller CPU per layer |
|---:|---:|---|---:|---:|---:|---:|---:|
{chr(10).join(lines)}

{chr(10).join(f"- {s}" for s in said)}
"""
    if not runs and not direct:
        body += "\n- No run finished; see the part's log for where it broke.\n"
    docs_section.write("fleet-large", body, "docs/benchmarks.md")
    docs_section.write("fleet-large", body, "docs/scaling.md")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "fleet":
        fleet(*sys.argv[2:5])
    elif mode == "large":
        large(*sys.argv[2:4])
    else:
        sys.exit(f"fleet_summary.py: unknown mode {mode!r} (fleet or large)")
