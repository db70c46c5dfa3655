//! Running a Lua script by its hash ([`eval`]): `EVALSHA`, and where the server lacks
//! the script (`NOSCRIPT`: restarted or flushed, a replica promoted) `SCRIPT LOAD` and
//! the same call once more, with its keys and arguments built again. fred's
//! `evalsha_with_reload` clones them for every call instead, in case it must send
//! again: an allocation per key and argument of every claim and completion.

use fred::interfaces::LuaInterface;
use fred::prelude::{Client, Error as FredError};
use fred::types::scripts::Script;
use fred::types::{FromValue, MultipleKeys, MultipleValues};

/// Runs `script` on `client` with the keys and arguments `call` builds (built a second
/// time only for the call after a `NOSCRIPT`).
pub(super) async fn eval<R, K, V>(
    script: &Script,
    client: &Client,
    call: impl Fn() -> (K, V),
) -> Result<R, FredError>
where
    R: FromValue,
    K: Into<MultipleKeys> + Send,
    V: TryInto<MultipleValues> + Send,
    V::Error: Into<FredError> + Send,
{
    let (keys, args) = call();
    match client.evalsha(script.sha1().clone(), keys, args).await {
        Err(e) if e.details().starts_with("NOSCRIPT") => {
            script.load(client).await?;
            let (keys, args) = call();
            client.evalsha(script.sha1().clone(), keys, args).await
        }
        answered => answered,
    }
}
