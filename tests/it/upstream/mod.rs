//! What the upstream does to a key: failures that are stored or release it, a slow
//! upstream that runs once (and a replica stopped while it runs), and HTTP/2 to
//! upstreams (`routes.upstream_protocol`).

mod failures;
mod h2;
mod slow;
mod stop;
