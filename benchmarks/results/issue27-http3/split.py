"""Shares of a py-spy raw profile of the gateway by part (RESULTS.md, third pass): split.py <before> <after>."""
import sys, collections
def split(path):
    c = collections.Counter(); tot = 0
    for line in open(path):
        st, _, n = line.rstrip().rpartition(' '); n = int(n); tot += n
        fr = [x.split(' (')[0] for x in st.split(';')]
        s = set(fr)
        if 'Gateway.submit' in s:
            if 'plan_batch' in s:
                k = 'submit: plan_batch (the fold, rows, answers, log entries)'
                if 'OrderFold._judge' in s: k2 = '  of which checks (validate_step: CEL context, rules, money, list limit)'; c[k2] += n
            elif any(f.startswith('Connection.') for f in fr): k = 'submit: asyncpg statements (execute/fetch, incl. socket writes)'
            elif 'read_batch' in s: k = 'submit: read rows to state (read_batch, Python side)'
            else: k = 'submit: other (transaction, record_rows/place, answers, metrics)'
        elif 'EventsFastPath.__call__' in s:
            if 'parse_body' in s: k = 'request: parse and validate the body'
            elif 'RequestResponseCycle.send' in s: k = 'request: response write (send, socket write)'
            elif 'Gatekeeper.admit' in s: k = 'request: auth and rate limit (admit)'
            else: k = 'request: other (answer, render, group commit hand-off)'
        elif 'HttpToolsProtocol.data_received' in s or 'GuardedHttpToolsProtocol.data_received' in s: k = 'uvicorn: HTTP parsing (data_received, headers, task creation)'
        else: k = 'event loop and the rest'
        c[k] += n
    return c, tot
a, ta = split(sys.argv[1]); b, tb = split(sys.argv[2])
for k in sorted(set(a) | set(b)):
    print(f"| {k} | {100*a[k]/ta:.1f} % | {100*b[k]/tb:.1f} % |")
print(ta, tb)
