"""A real gRPC client (grpcio) for the gRPC tests: runs the calls of a JSON plan
(argv[1]) against a target and prints one JSON result per call.

Plan: {"target": "127.0.0.1:PORT", "calls": [CALL, ...]}, run in order. CALL:
{"method": "/demo.Payments/Create", "kind": "unary" | "server_stream" | "bidi",
 "message": "text", "messages": [...] (bidi), "key": "k" (optional), "tenant": "t"
 (optional), "parallel": N (optional: N identical calls at once), "target": "..."
 (optional: another target than the plan's), "delay_ms": D (optional: in a group,
 wait that long first)}, or {"kind": "group", "calls": [CALL, ...]}: its calls at once.
Result: {"code": "OK", "details": str, "messages": [hex...], "initial": [[k, v]...],
"trailing": [[k, v]...]} (binary metadata values as hex); a list of them for parallel
calls and groups. A server streaming call's result also has "started_ms", "at_ms" (when
each message arrived) and "ended_ms", in `time.monotonic()` ms. A bidi call sends each
message only after the answer to the one before.
"""
import json
import queue
import sys
import threading
import time
from concurrent import futures

import grpc


def meta(pairs):
    out = []
    for k, v in pairs or ():
        out.append([k, v.hex() if isinstance(v, bytes) else v])
    return out


def metadata(call):
    md = []
    if call.get("key") is not None:
        md.append(("idempotency-key", call["key"]))
    if call.get("tenant") is not None:
        md.append(("x-tenant-id", call["tenant"]))
    return md


def result(code, details, messages, initial, trailing):
    return {
        "code": code.name,
        "details": details or "",
        "messages": [m.hex() for m in messages],
        "initial": meta(initial),
        "trailing": meta(trailing),
    }


def unary(channel, call):
    stub = channel.unary_unary(call["method"])
    try:
        response, c = stub.with_call(
            call["message"].encode(), metadata=metadata(call), timeout=20
        )
        return result(c.code(), c.details(), [response], c.initial_metadata(), c.trailing_metadata())
    except grpc.RpcError as e:
        return result(e.code(), e.details(), [], e.initial_metadata(), e.trailing_metadata())


def now_ms():
    return time.monotonic() * 1000


def server_stream(channel, call):
    stub = channel.unary_stream(call["method"])
    started = now_ms()
    it = stub(call["message"].encode(), metadata=metadata(call), timeout=20)
    messages, at = [], []
    try:
        for m in it:
            messages.append(m)
            at.append(now_ms())
    except grpc.RpcError:
        pass
    out = result(it.code(), it.details(), messages, it.initial_metadata(), it.trailing_metadata())
    out.update(started_ms=started, at_ms=at, ended_ms=now_ms())
    return out


def bidi(channel, call):
    stub = channel.stream_stream(call["method"])
    answered = queue.Queue()
    to_send = [m.encode() for m in call["messages"]]

    def requests():
        for i, m in enumerate(to_send):
            if i > 0:
                # The next message only once the last one was answered: a proxy that
                # buffered the request stream would never answer, and this times out.
                answered.get(timeout=10)
            yield m

    it = stub(requests(), metadata=metadata(call), timeout=20)
    messages = []
    try:
        for m in it:
            messages.append(m)
            answered.put(True)
    except grpc.RpcError:
        pass
    return result(it.code(), it.details(), messages, it.initial_metadata(), it.trailing_metadata())


KINDS = {"unary": unary, "server_stream": server_stream, "bidi": bidi}


class Channels:
    """One channel per target, the plan's by default."""

    def __init__(self, default):
        self.default, self.open, self.lock = default, {}, threading.Lock()

    def get(self, target):
        target = target or self.default
        with self.lock:
            if target not in self.open:
                self.open[target] = grpc.insecure_channel(target)
            return self.open[target]

    def close(self):
        for channel in self.open.values():
            channel.close()


def group(channels, call):
    def one(sub):
        time.sleep(sub.get("delay_ms", 0) / 1000)
        return run(channels, sub)

    with futures.ThreadPoolExecutor(max_workers=len(call["calls"])) as pool:
        return list(pool.map(one, call["calls"]))


def run(channels, call):
    if call.get("kind") == "group":
        return group(channels, call)
    run_one = KINDS[call.get("kind", "unary")]
    channel = channels.get(call.get("target"))
    n = call.get("parallel")
    if not n:
        return run_one(channel, call)
    with futures.ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(lambda _: run_one(channel, call), range(n)))


def main():
    plan = json.loads(sys.argv[1])
    channels = Channels(plan["target"])
    try:
        print(json.dumps([run(channels, call) for call in plan["calls"]]))
    finally:
        channels.close()


if __name__ == "__main__":
    main()
