//! gRPC through the gateway with a real grpcio client and server (`tests/grpc/`,
//! `support/grpc.rs`): keyed unary calls, the edges of the protocol, slow upstreams.
//! Keyed server-streaming calls are in `streaming/grpc.rs`.

mod basics;
mod edges;
mod slow;
