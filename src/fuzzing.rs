//! What the fuzz targets in `fuzz/` reach that the public API does not: the decoders
//! of the Lua scripts' replies, the route table and canonical paths, and the header a
//! replay carries. Compiled only with the `fuzzing` feature (which only
//! the `fuzz/` crate turns on); not part of idemgate's API.

pub use fred::prelude::Value;

pub use crate::proxy::headers::REPLAYED;
pub use crate::route::{path, RouteTable};
pub use crate::store::redis::{Invalidated, Record};
pub use crate::store::StoreError;

/// The decoder of `claim.lua` and `peek.lua` replies (`script` names the script in errors).
pub fn decode_record_reply(script: &'static str, reply: Value) -> Result<Record, StoreError> {
    crate::store::redis::decode_record_reply(script, reply)
}

/// The decoder of `invalidate.lua` replies.
pub fn decode_invalidate_reply(reply: Value) -> Result<Invalidated, StoreError> {
    crate::store::redis::invalidate::decode_invalidate_reply(reply)
}
