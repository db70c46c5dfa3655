//! The lifecycle matrix's rows ([`super`]): each kind of keyed request in flight
//! against each event, one test per cell. The SIGTERM cell of each kind but the
//! completer's (which waits out a lease first) is in the fast subset (`cargo test`,
//! so `make test`); `make chaos` runs them all.

use crate::harness::run;
use crate::lifecycle::{self, Event, Kind};

macro_rules! lifecycle {
    ($($test:ident: $kind:ident x $event:ident $(, $ignore:literal)?;)*) => {$(
        #[test]
        $(#[ignore = $ignore])?
        fn $test() {
            let name = lifecycle::cell_name(Kind::$kind, Event::$event);
            run(&name, |n| lifecycle::cell(n, Kind::$kind, Event::$event));
        }
    )*};
}

lifecycle! {
    lifecycle_buffered_sigterm: Buffered x Sigterm;
    lifecycle_live_sigterm: Live x Sigterm;
    lifecycle_detached_sigterm: Detached x Sigterm;
    lifecycle_waiter_sigterm: Waiter x Sigterm;
    lifecycle_joiner_sigterm: Joiner x Sigterm;
    lifecycle_completer_sigterm: Completer x Sigterm, "chaos: make chaos";
    lifecycle_buffered_sigkill: Buffered x Sigkill, "chaos: make chaos";
    lifecycle_live_sigkill: Live x Sigkill, "chaos: make chaos";
    lifecycle_detached_sigkill: Detached x Sigkill, "chaos: make chaos";
    lifecycle_waiter_sigkill: Waiter x Sigkill, "chaos: make chaos";
    lifecycle_joiner_sigkill: Joiner x Sigkill, "chaos: make chaos";
    lifecycle_completer_sigkill: Completer x Sigkill, "chaos: make chaos";
    lifecycle_buffered_sigstop: Buffered x Sigstop, "chaos: make chaos";
    lifecycle_live_sigstop: Live x Sigstop, "chaos: make chaos";
    lifecycle_detached_sigstop: Detached x Sigstop, "chaos: make chaos";
    lifecycle_waiter_sigstop: Waiter x Sigstop, "chaos: make chaos";
    lifecycle_joiner_sigstop: Joiner x Sigstop, "chaos: make chaos";
    lifecycle_completer_sigstop: Completer x Sigstop, "chaos: make chaos";
    lifecycle_buffered_invalidate: Buffered x Invalidate, "chaos: make chaos";
    lifecycle_buffered_forced_invalidate: Buffered x ForcedInvalidate, "chaos: make chaos";
    lifecycle_live_invalidate: Live x Invalidate, "chaos: make chaos";
    lifecycle_live_forced_invalidate: Live x ForcedInvalidate, "chaos: make chaos";
    lifecycle_detached_invalidate: Detached x Invalidate, "chaos: make chaos";
    lifecycle_detached_forced_invalidate: Detached x ForcedInvalidate, "chaos: make chaos";
    lifecycle_waiter_invalidate: Waiter x Invalidate, "chaos: make chaos";
    lifecycle_waiter_forced_invalidate: Waiter x ForcedInvalidate, "chaos: make chaos";
    lifecycle_joiner_invalidate: Joiner x Invalidate, "chaos: make chaos";
    lifecycle_joiner_forced_invalidate: Joiner x ForcedInvalidate, "chaos: make chaos";
    lifecycle_completer_invalidate: Completer x Invalidate, "chaos: make chaos";
    lifecycle_completer_forced_invalidate: Completer x ForcedInvalidate, "chaos: make chaos";
    lifecycle_buffered_expiry: Buffered x Expiry, "chaos: make chaos";
    lifecycle_live_expiry: Live x Expiry, "chaos: make chaos";
    lifecycle_detached_expiry: Detached x Expiry, "chaos: make chaos";
    lifecycle_waiter_expiry: Waiter x Expiry, "chaos: make chaos";
    lifecycle_joiner_expiry: Joiner x Expiry, "chaos: make chaos";
    lifecycle_completer_expiry: Completer x Expiry, "chaos: make chaos";
    lifecycle_buffered_redis_restart: Buffered x RedisRestart, "chaos: make chaos";
    lifecycle_live_redis_restart: Live x RedisRestart, "chaos: make chaos";
    lifecycle_detached_redis_restart: Detached x RedisRestart, "chaos: make chaos";
    lifecycle_waiter_redis_restart: Waiter x RedisRestart, "chaos: make chaos";
    lifecycle_joiner_redis_restart: Joiner x RedisRestart, "chaos: make chaos";
    lifecycle_completer_redis_restart: Completer x RedisRestart, "chaos: make chaos";
}
