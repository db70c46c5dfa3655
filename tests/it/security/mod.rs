//! What a client cannot do to another or to the gateway: tenant scopes, forged
//! gateway-owned headers, forwarding headers from untrusted peers, route choice by path
//! spelling; records sealed at rest; secrets that never leak.

mod encryption;
mod forwarding;
mod owned_headers;
mod paths;
mod secrets;
mod tenancy;
