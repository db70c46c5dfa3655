"""A real gRPC server (grpcio) for the gRPC tests, without protobuf: messages are raw
bytes. Prints its port, then serves until killed.

Methods of `demo.Payments`:
- `Create` (unary): counts one execution per `idempotency-key`; the message says what
  to do: `sleep:<ms>:...` waits first, `unavailable...` aborts with UNAVAILABLE,
  `declined...` aborts with FAILED_PRECONDITION and trailers of its own; otherwise it
  answers `paid:<message>:<n>:<random>` with initial metadata `x-first` and trailers
  `x-ledger` (random) and `x-receipt-bin` (random bytes), so a second execution can
  never answer the same bytes. `owned-trailers` answers
  with trailers that name headers only the gateway may set (`idempotent-replayed`,
  `idempotency-status`) beside `x-kept`.
- `Count` (unary): the executions per key, as JSON.
- `Feed` (server streaming): three messages, then trailers. `every:<ms>:<n>:<text>`
  sends `n` messages `<ms>` apart instead (the first at once), each
  `<text>:<i>:<id>:<sent>` with the execution's random `id` and when it was sent
  (`time.monotonic()` in ms: CLOCK_MONOTONIC, the clock of the client's `at_ms`), then
  trailers `x-fed` (n), `x-feed-id` (the id) and `x-feed-receipt-bin` (random bytes);
  a `<text>` that starts with `fail` then ends FAILED_PRECONDITION `feed failed` (the
  same trailers).
- `Chat` (bidirectional): answers each message as it arrives.
Every method but `Count` counts an execution per key.
"""
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

executions = {}
lock = threading.Lock()


def key_of(context):
    for k, v in context.invocation_metadata():
        if k == "idempotency-key":
            return v
    return ""


def execute(context):
    key = key_of(context)
    with lock:
        executions[key] = executions.get(key, 0) + 1
        return executions[key]


def create(request, context):
    n = execute(context)
    if request.startswith(b"sleep:"):
        time.sleep(int(request.split(b":")[1]) / 1000)
    if request.startswith(b"unavailable"):
        context.abort(grpc.StatusCode.UNAVAILABLE, "try again later")
    if request.startswith(b"declined"):
        context.set_trailing_metadata((("x-decline-reason", "insufficient-funds"),))
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "card declined")
    if request.startswith(b"owned-trailers"):
        context.set_trailing_metadata(
            (("idempotent-replayed", "true"), ("idempotency-status", "bypassed"), ("x-kept", "1"))
        )
        return b"owned:" + str(n).encode()
    context.send_initial_metadata((("x-first", "1"),))
    context.set_trailing_metadata(
        (("x-ledger", os.urandom(8).hex()), ("x-receipt-bin", os.urandom(12)))
    )
    return b"paid:" + request + b":" + str(n).encode() + b":" + os.urandom(8).hex().encode()


def count(request, context):
    with lock:
        return json.dumps(executions).encode()


def feed(request, context):
    execute(context)
    if request.startswith(b"every:"):
        yield from feed_every(request, context)
        return
    for i in range(3):
        yield request + b":" + str(i).encode()
    context.set_trailing_metadata((("x-fed", "3"),))


def feed_every(request, context):
    _, gap, n, text = request.split(b":", 3)
    feed_id = os.urandom(8).hex().encode()
    for i in range(int(n)):
        if i > 0:
            time.sleep(int(gap) / 1000)
        sent = str(int(time.monotonic() * 1000)).encode()
        yield b":".join((text, str(i).encode(), feed_id, sent))
    context.set_trailing_metadata(
        (("x-fed", n.decode()), ("x-feed-id", feed_id.decode()), ("x-feed-receipt-bin", os.urandom(12)))
    )
    if text.startswith(b"fail"):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "feed failed")


def chat(requests, context):
    execute(context)
    for message in requests:
        yield b"echo:" + message


def main():
    handler = grpc.method_handlers_generic_handler(
        "demo.Payments",
        {
            "Create": grpc.unary_unary_rpc_method_handler(create),
            "Count": grpc.unary_unary_rpc_method_handler(count),
            "Feed": grpc.unary_stream_rpc_method_handler(feed),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    # Ends with its parent: the test closes our stdin when it drops us.
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
