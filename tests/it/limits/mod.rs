//! Bounded resources: request bodies (`server.max_request_body`), connections, requests
//! in flight and the buffer budget on the proxy listener, and `server.write_timeout`.

mod body;
mod listener;
mod write_timeout;
