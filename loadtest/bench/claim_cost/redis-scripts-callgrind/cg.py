#!/usr/bin/env python3
"""Instructions (callgrind) per claim+complete pair in one redis-server per script variant.
Usage: cg.py PAIRS LABEL=LUADIR ...  (the release launcher, or FLEET_BIN, starts Redis)"""
import subprocess, sys, os, time, socket, re
pairs = int(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *['..'] * 4))
FLEET = os.environ.get('FLEET_BIN', os.path.join(ROOT, 'target/release/idemgate-fleet'))
os.makedirs('/tmp/luacost', exist_ok=True)
for spec in sys.argv[2:]:
    label, d = spec.split('=', 1)
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    out = '/tmp/luacost/cg-%s.out' % label
    # The launcher's redis-server command line (fleet/src/serve_redis.rs), under
    # valgrind; the launcher becomes valgrind (exec), so p.pid is the one to profile.
    p = subprocess.Popen([FLEET, 'redis', '--port', str(port), '--dir', '/tmp/luacost',
                          '--under', 'valgrind --tool=callgrind --callgrind-out-file=' + out,
                          '--', '--save', '', '--appendonly', 'no'],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', port)).close(); break
        except OSError: time.sleep(0.2)
    # warm-up (markers, script load) then the measured window between zero and dump
    env = dict(os.environ, CG_PID=str(p.pid))
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'client.py'), str(port), '1', str(pairs), '16', '%s=%s' % (label, d)],
                       env=env, capture_output=True, text=True)
    print(r.stdout.strip(), r.stderr.strip()[-500:])
    p.terminate(); p.wait()
