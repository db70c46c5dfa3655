"""A real gRPC client (grpcio) for the gRPC tests: runs the calls of a JSON plan
(argv[1]) against a target and prints one JSON result per call.

Plan: {"target": "127.0.0.1:PORT", "calls": [CALL, ...]}, run in order. CALL:
{"method": "/demo.Payments/Create", "kind": "unary" | "server_stream" | "bidi",
 "message": "text", "messages": [...] (bidi), "key": "k" (optional), "tenant": "t"
 (optional), "parallel": N (optional: N identical calls at once)}.
Result: {"code": "OK", "details": str, "messages": [hex...], "initial": [[k, v]...],
"trailing": [[k, v]...]} (binary metadata values as hex); a list of them for parallel
calls. A bidi call sends each message only after the answer to the one before.
"""
import json
import queue
import sys
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


def server_stream(channel, call):
    stub = channel.unary_stream(call["method"])
    it = stub(call["message"].encode(), metadata=metadata(call), timeout=20)
    messages = []
    try:
        for m in it:
            messages.append(m)
    except grpc.RpcError:
        pass
    return result(it.code(), it.details(), messages, it.initial_metadata(), it.trailing_metadata())


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


def run(channel, call):
    run_one = KINDS[call.get("kind", "unary")]
    n = call.get("parallel")
    if not n:
        return run_one(channel, call)
    with futures.ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(lambda _: run_one(channel, call), range(n)))


def main():
    plan = json.loads(sys.argv[1])
    with grpc.insecure_channel(plan["target"]) as channel:
        print(json.dumps([run(channel, call) for call in plan["calls"]]))


if __name__ == "__main__":
    main()
