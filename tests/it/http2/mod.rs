//! HTTP/2 on the proxy listener (h2c beside HTTP/1.1), the `server.http2_*` settings on
//! the wire, HTTP/2 requests reaching HTTP/1.1 upstreams, and HAProxy speaking h2 to the
//! replicas. The attacks are in `h2_abuse/`; HTTP/2 to upstreams in `upstream/h2.rs`.

mod frames;
mod h2c;
mod haproxy;
mod headers;
