import json, glob, statistics, re
pairs = [("F", "k4l1"), ("G", "k4b"), ("H", "k4c"), ("J", "k4c")]
ev, p99, gw, pg, rows = [], [], [], [], []
for rnd, tag in pairs:
    for b in sorted(glob.glob(f"/tmp/k4/{rnd}-base-r*.json")):
        n = re.search(r"-r(\d+)\.json", b).group(1)
        t = f"/tmp/k4/{rnd}-{tag}-r{n}.json"
        try: x = json.load(open(t))["results"][0]; y = json.load(open(b))["results"][0]; l = json.load(open(t))["meta"]["load_avg_before"][0]
        except FileNotFoundError: continue
        ev.append(x["events_per_s"] / y["events_per_s"]); p99.append(x["p99_ms"]); gw.append(x["cpu_s_per_1000"]["gateway"] / y["cpu_s_per_1000"]["gateway"])
        pg.append(x["cpu_s_per_1000"]["postgres"] / y["cpu_s_per_1000"]["postgres"])
        rows.append(f"{rnd}{n} load {l:4.1f} ev/s {y['events_per_s']:6.0f} -> {x['events_per_s']:6.0f} ({ev[-1]:.2f}x)  p99 {y['p99_ms']:6.0f} -> {x['p99_ms']:5.0f}  gw {y['cpu_s_per_1000']['gateway']:.3f} -> {x['cpu_s_per_1000']['gateway']:.3f}")
print("\n".join(rows))
print(f"pairs {len(ev)}: events/s ratio median {statistics.median(ev):.2f} (geo mean {statistics.geometric_mean(ev):.2f}); p99 median {statistics.median(p99):.0f} ms, under 250 in {sum(p < 250 for p in p99)}; gw ratio median {statistics.median(gw):.2f}; pg ratio median {statistics.median(pg):.2f}")
