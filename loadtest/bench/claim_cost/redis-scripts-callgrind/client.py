#!/usr/bin/env python3
"""Redis CPU per (claim of a new key + completion) for script variants, interleaved.
Usage: client.py PORT ROUNDS PAIRS DEPTH LABEL=LUADIR ...  (redis-server already running)"""
import subprocess, socket, sys, os, hashlib, statistics, time
port, rounds, pairs, depth = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
variants = [a.split('=', 1) for a in sys.argv[5:]]

def enc(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        if isinstance(a, str): a = a.encode()
        elif isinstance(a, int): a = str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)

class Conn:
    def __init__(self):
        self.s = socket.create_connection(('127.0.0.1', port)); self.buf = b''
    def send(self, data): self.s.sendall(data)
    def _line(self):
        while b'\r\n' not in self.buf: self.buf += self.s.recv(1 << 16)
        i = self.buf.index(b'\r\n'); l = self.buf[:i]; self.buf = self.buf[i+2:]; return l
    def _n(self, n):
        while len(self.buf) < n: self.buf += self.s.recv(1 << 16)
        d = self.buf[:n]; self.buf = self.buf[n:]; return d
    def read(self):
        l = self._line(); t = l[:1]
        if t == b'+' or t == b':': return l[1:]
        if t == b'-': raise RuntimeError(l)
        if t == b'$':
            n = int(l[1:]);
            if n < 0: return None
            d = self._n(n + 2); return d[:-2]
        if t == b'*': return [self.read() for _ in range(int(l[1:]))]
        raise RuntimeError(l)
    def cmd(self, *a): self.send(enc(*a)); return self.read()

c = Conn()
import threading
subs = []
for _ in range(int(os.environ.get('SUBS', '1'))):
    sub = Conn(); sub.send(enc('PSUBSCRIBE', 'idemgate:{*}:done')); subs.append(sub)
    def drain(sock=sub.s):
        while sock.recv(1 << 20): pass
    threading.Thread(target=drain, daemon=True).start()
shas = {}
for label, d in variants:
    shas[label] = {n: c.cmd('SCRIPT', 'LOAD', open(os.path.join(d, n + '.lua')).read()).decode() for n in ('claim', 'complete')}

def info(section):
    txt = c.cmd('INFO', section).decode()
    return dict(l.split(':', 1) for l in txt.split('\r\n') if ':' in l)

def cpu():
    i = info('cpu'); return float(i['used_cpu_user']) + float(i['used_cpu_sys'])

fp = hashlib.sha256(b'x').digest()
resp = os.urandom(300)
counter = [0]
def run(label):
    sha = shas[label]
    short = os.path.exists(os.path.join(dict(variants)[label], 'short'))
    cmds = []
    for _ in range(pairs):
        counter[0] += 1
        rec = 'idemgate:{%032x}' % counter[0]
        tok = '%032x' % (counter[0] * 7)
        marker = 'idemgate:warm:{%x}' % (counter[0] % 4096)
        cmds.append(enc('EVALSHA', sha['claim'], 3, rec, rec + ':n', marker, fp, tok, 30000, 86430000, 86400000))
        if short: cmds.append(enc('EVALSHA', sha['complete'], 1, rec, tok, resp, 86400000, fp, 'PUBLISH'))
        else: cmds.append(enc('EVALSHA', sha['complete'], 1, rec, tok, resp, 86400000, fp, rec + ':done', 'PUBLISH'))
    cg = os.environ.get('CG_PID')
    if cg: subprocess.run(['callgrind_control', '-z', cg], capture_output=True)
    t0 = cpu()
    for i in range(0, len(cmds), depth):
        chunk = cmds[i:i+depth]
        c.send(b''.join(chunk))
        for _ in chunk:
            r = c.read()
    if cg:
        o = subprocess.run(['callgrind_control', '-d', cg], capture_output=True, text=True)
        import glob
        time.sleep(0.5)
        files = sorted(glob.glob('/tmp/luacost/cg-%s.out.*' % label), key=os.path.getmtime)
        ir = 0
        for line in open(files[-1]):
            if line.startswith('summary:') or line.startswith('totals:'):
                ir = int(line.split()[1])
        print('CG %s instructions per pair: %.0f' % (label, ir / pairs))
    return (cpu() - t0) * 1e6 / pairs

res = {l: [] for l, _ in variants}
# warm-up: every marker exists and young
for l, _ in variants: run(l)
for r in range(rounds):
    for l, _ in variants:
        res[l].append(run(l))
for l, _ in variants:
    print(l, 'median %.2f us/pair' % statistics.median(res[l]), ' '.join('%.2f' % x for x in res[l]))
