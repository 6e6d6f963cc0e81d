import json, collections, sys, re
def load(n):
    ev = json.load(open(f'/tmp/perf17prof/{n}.json'))['results'][0]['events_per_s']
    self_ = collections.Counter(); incl = collections.Counter(); total = 0
    for line in open(f'/tmp/perf17prof/{n}.raw'):
        line=line.rstrip('\n')
        if not line: continue
        stack, cnt = line.rsplit(' ', 1); cnt = int(cnt)
        frames = [re.sub(r':\d+\)$', ')', f) for f in stack.split(';')]
        frames = [re.sub(r' \(/.*?/(site-packages|src|python3\.11)/', ' (', f) for f in frames]
        total += cnt
        self_[frames[-1]] += cnt
        for f in set(frames): incl[f] += cnt
    k = 5.0 / (ev * 9 / 1000)  # ms per sample per 1k events
    return {f: c*k for f,c in self_.items()}, {f: c*k for f,c in incl.items()}, total*k
builds = {'base': ['base1','base2'], 'tree': ['tree1','tree2']}
agg = {}
for b, ns in builds.items():
    s = collections.Counter(); i = collections.Counter(); t = 0
    for n in ns:
        a, c, tt = load(n); s.update(a); i.update(c); t += tt
    agg[b] = ({f:v/len(ns) for f,v in s.items()}, {f:v/len(ns) for f,v in i.items()}, t/len(ns))
print('total ms/1k sampled', {b: round(agg[b][2],1) for b in agg})
which = 0 if len(sys.argv) < 2 else int(sys.argv[1])
keys = set(agg['base'][which]) | set(agg['tree'][which])
diff = sorted(keys, key=lambda f: -(agg['tree'][which].get(f,0)-agg['base'][which].get(f,0)))
for f in diff[:int(sys.argv[2]) if len(sys.argv)>2 else 30]:
    print('%7.1f %7.1f %+6.1f %s' % (agg['base'][which].get(f,0), agg['tree'][which].get(f,0), agg['tree'][which].get(f,0)-agg['base'][which].get(f,0), f[:150]))
