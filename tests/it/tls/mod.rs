//! TLS everywhere the gateway speaks it: the proxy listener (and its certificate reload),
//! Redis (`rediss://`), Postgres (`sslmode`) and HTTPS upstreams, with a private CA.

mod listener;
mod postgres;
mod redis;
mod reload;
mod upstream;
