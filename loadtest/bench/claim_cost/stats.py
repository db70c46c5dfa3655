"""The claim script's cost in Redis: interleaved rounds of EVALSHA of two
versions of lua/claim.lua against a running redis-server, each round read from Redis'
own INFO commandstats (usec_per_call of evalsha).

    python3 stats.py PORT ROUNDS CALLS OLD.lua NEW.lua [variant,variant,...]

e.g. OLD.lua from `git show f76beac:lua/claim.lua`. Variants: old_steady, old_fresh
(markers of the old format, two days / one minute old), new_steady, new_fresh (markers
as the new script writes them), new_nomarker (no marker key). Every call acquires a
fresh record; the marker is one of 16,384 at random. Use a throwaway server: it sets
markers under the prefixes o, y, n, f and records under b."""
import socket, sys, time, statistics, random, os

def enc(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        if not isinstance(a, bytes): a = str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)

class R:
    def __init__(s, port):
        s.s = socket.create_connection(('127.0.0.1', port)); s.buf = b''
    def _line(s):
        while b'\r\n' not in s.buf: s.buf += s.s.recv(1 << 16)
        i = s.buf.index(b'\r\n'); l = s.buf[:i]; s.buf = s.buf[i+2:]; return l
    def _n(s, n):
        while len(s.buf) < n + 2: s.buf += s.s.recv(1 << 16)
        d = s.buf[:n]; s.buf = s.buf[n+2:]; return d
    def read(s):
        l = s._line(); t = l[:1]
        if t == b'+': return l[1:].decode()
        if t == b'-': raise RuntimeError(l.decode())
        if t == b':': return int(l[1:])
        if t == b'$':
            n = int(l[1:]); return None if n < 0 else s._n(n)
        if t == b'*':
            n = int(l[1:]); return None if n < 0 else [s.read() for _ in range(n)]
    def cmd(s, *a):
        s.s.sendall(enc(*a)); return s.read()
    def pipe(s, cmds):
        s.s.sendall(b''.join(enc(*c) for c in cmds)); return [s.read() for _ in cmds]

port = int(sys.argv[1]); rounds = int(sys.argv[2]); n = int(sys.argv[3])
r = R(port)
old = open(sys.argv[4]).read(); new = open(sys.argv[5]).read()
sha_old = r.cmd('SCRIPT', 'LOAD', old).decode(); sha_new = r.cmd('SCRIPT', 'LOAD', new).decode()
now_ms = int(time.time() * 1000); two_days = 48 * 3600 * 1000
run_id = [l for l in r.cmd('INFO', 'server').decode().split('\r\n') if l.startswith('run_id:')][0][7:]
M = 16384
# old-format markers, two days old (steady state) and one minute old (fresh)
r.pipe([('SET', f'o:warm:{{{i}}}', f'{now_ms - two_days} {run_id}') for i in range(M)])
r.pipe([('SET', f'y:warm:{{{i}}}', f'{now_ms - 60000} {run_id}') for i in range(M)])
mk = "redis.call('SET', KEYS[1], ARGV[1]) redis.set_repl(redis.REPL_NONE) redis.call('APPEND', KEYS[1], '') redis.set_repl(redis.REPL_ALL) return 1"
r.pipe([('EVAL', mk, 1, f'n:warm:{{{i}}}', now_ms - two_days) for i in range(M)])
r.pipe([('EVAL', mk, 1, f'f:warm:{{{i}}}', now_ms - 60000) for i in range(M)])
day = 24 * 3600 * 1000
variants = {
  'old_steady': (sha_old, 'o'), 'old_fresh': (sha_old, 'y'),
  'new_steady': (sha_new, 'n'), 'new_fresh': (sha_new, 'f'), 'new_nomarker': (sha_new, None),
}
order = sys.argv[6].split(',') if len(sys.argv) > 6 else list(variants)
res = {k: [] for k in order}; ages = {}
fp = os.urandom(32)
for rnd in range(rounds):
    for name in order:
        sha, pfx = variants[name]
        r.cmd('CONFIG', 'RESETSTAT')
        batch = []
        got = []
        for i in range(n):
            key = f'b:{{{name}-{rnd}-{i}}}'
            keys = [key, key + ':n'] + ([f'{pfx}:warm:{{{random.randrange(M)}}}'] if pfx else [])
            batch.append(('EVALSHA', sha, len(keys), *keys, fp, 'tok', 5000, 5000, day))
            if len(batch) == 200:
                got += r.pipe(batch); batch = []
        if batch: got += r.pipe(batch)
        assert all(g[0] == b'A' for g in got), got[:3]
        ages[name] = got[-1][2]
        st = r.cmd('INFO', 'commandstats').decode()
        line = [l for l in st.split('\r\n') if l.startswith('cmdstat_evalsha:')][0]
        f = dict(kv.split('=') for kv in line.split(':', 1)[1].split(','))
        assert int(f['calls']) == n, f
        res[name].append(float(f['usec_per_call']))
for name in order:
    print(f"{name:14s} usec_per_call rounds {' '.join('%.2f' % x for x in res[name])}  median {statistics.median(res[name]):.2f}  (last marker age {ages[name]})")
