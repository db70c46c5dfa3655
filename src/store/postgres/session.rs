//! A pooled session lent to a statement ([`lend`]): back to the pool once the statement
//! answered; closed, never handed out again, when it did not (the client's deadline
//! passed, or the caller was dropped mid-statement).
//!
//! A statement whose answer never came leaves its session waiting for it: on a server
//! that went silent (powered off, partitioned) the next statement sent on that session
//! would wait as long again, and the kernel takes many minutes to give up on the
//! socket. So such a session is taken out of the pool (deadpool's `Object::take`) and
//! dropped, which stops its connection task and closes the socket. deadpool offers no
//! per-session mark that a recycling hook could read, and a test query at each checkout
//! (`RecyclingMethod::Verified`) would cost every statement a round trip and still wait
//! out its own timeout on a silent server.
//!
//! The statement's future owns its [`Session`]; however that future ends, the session
//! goes back to a home shared with the lender ([`Lent`]), which returns it to the pool
//! only when told the statement answered ([`Lent::answered`]). Whatever is left at home
//! when the last of the two goes is closed.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use deadpool_postgres::Object;

/// Where a lent session waits for the lender's verdict; closes what it still holds.
struct Home(Mutex<Option<Object>>);

impl Drop for Home {
    fn drop(&mut self) {
        let left = self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(object) = left {
            drop(Object::take(object));
        }
    }
}

/// The session a statement runs on (derefs to the pooled connection).
pub(super) struct Session {
    object: Option<Object>,
    home: Arc<Home>,
}

/// The lender's side of a [`Session`].
pub(super) struct Lent {
    home: Arc<Home>,
    created: Instant,
}

/// Lends `object` to one statement.
pub(super) fn lend(object: Object) -> (Session, Lent) {
    let created = Object::metrics(&object).created;
    let home = Arc::new(Home(Mutex::new(None)));
    let lent = Lent {
        home: home.clone(),
        created,
    };
    let session = Session {
        object: Some(object),
        home,
    };
    (session, lent)
}

impl Lent {
    /// When the session's connection was made.
    pub(super) fn created(&self) -> Instant {
        self.created
    }

    /// The statement answered (with rows or an error) and its future is done: the
    /// session goes back to the pool, which drops it there if its connection is closed.
    pub(super) fn answered(self) {
        let back = self.home.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(back);
    }
}

impl Deref for Session {
    type Target = Object;
    fn deref(&self) -> &Object {
        // `object` is only taken by `drop`.
        self.object
            .as_ref()
            .expect("a session holds its connection")
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Object {
        self.object
            .as_mut()
            .expect("a session holds its connection")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            *self.home.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(object);
        }
    }
}
