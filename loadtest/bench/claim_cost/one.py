"""One variant of stats.py's claims against a server (run by callgrind.sh):
    python3 one.py PORT VARIANT CALLS SCRIPT.lua"""
import sys, time, os, random
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'stats.py')).read().split("port = int(sys.argv[1])")[0])
port = int(sys.argv[1]); name = sys.argv[2]; n = int(sys.argv[3]); script = sys.argv[4]
r = R(port)
sha = r.cmd('SCRIPT', 'LOAD', open(script).read()).decode()
now_ms = int(time.time() * 1000); two_days = 48 * 3600 * 1000; M = 16384; day = 86400000
run_id = [l for l in r.cmd('INFO', 'server').decode().split('\r\n') if l.startswith('run_id:')][0][7:]
age = {'steady': two_days, 'fresh': 60000}.get(name.split('_')[1], None)
fmt = name.split('_')[0]
if age is not None:
    if fmt == 'old':
        r.pipe([('SET', f'm:warm:{{{i}}}', f'{now_ms - age} {run_id}') for i in range(M)])
    else:
        mk = "redis.call('SET', KEYS[1], ARGV[1]) redis.set_repl(redis.REPL_NONE) redis.call('APPEND', KEYS[1], '') redis.set_repl(redis.REPL_ALL) return 1"
        r.pipe([('EVAL', mk, 1, f'm:warm:{{{i}}}', now_ms - age) for i in range(M)])
fp = os.urandom(32); got = []; batch = []
for i in range(n):
    key = f'b:{{{i}}}'
    keys = [key, key + ':n'] + ([f'm:warm:{{{random.randrange(M)}}}'] if age is not None else [])
    batch.append(('EVALSHA', sha, len(keys), *keys, fp, 'tok', 5000, 5000, day))
    if len(batch) == 100: got += r.pipe(batch); batch = []
if batch: got += r.pipe(batch)
assert all(g[0] == b'A' for g in got)
print(name, 'last age', got[-1][2], file=sys.stderr)
