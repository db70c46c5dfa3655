//! Integration tests: the gateway in-process against real `redis-server` processes and
//! a counting mock upstream. One test binary, so they link once, with a folder per
//! subject (each `mod.rs` says what its tests cover) and the shared helpers in `support/`.

mod support;

mod binary;
mod claim;
mod completer;
mod grpc;
mod h2_abuse;
mod http2;
mod limits;
mod observability;
mod postgres;
mod redis;
mod replay;
mod security;
mod streaming;
mod tls;
mod upstream;
