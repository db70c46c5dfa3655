//! A raw HTTP/2 client that writes frames by hand, as an abusive client would (no flow
//! control, no limits obeyed), and reads what the gateway sends back frame by frame:
//! the frame-level tests (`tests/it/http2/frames.rs`, `tests/it/h2_abuse/`) and the
//! chaos suite's HTTP/2 floods and attacks. [`Held`] is a connection that holds what it
//! asked for: it answers PINGs and acknowledges SETTINGS, so it looks alive, but never
//! opens a window.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
/// RST_STREAM's code for a stream the client gives up on.
pub const CANCEL: u32 = 0x8;
/// RST_STREAM's code for a stream over the server's concurrency limit.
pub const REFUSED_STREAM: u32 = 0x7;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;
/// SETTINGS_INITIAL_WINDOW_SIZE: 0 lets the server send no response body at all.
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
/// The ACK flag of SETTINGS and PING.
pub const ACK: u8 = 0x1;
/// SETTINGS_HEADER_TABLE_SIZE: 0 keeps the server's HPACK encoder off its dynamic
/// table, so that an answer's `:status` can be read without tracking it ([`status`]).
pub const HEADER_TABLE_SIZE: u16 = 0x1;

/// One frame: its 9-byte head and `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// A `GET /` HEADERS frame (HPACK static table entries, a literal authority);
/// `end_stream` closes the client's side.
pub fn get(stream: u32, end_stream: bool) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x41, 9];
    block.extend(b"localhost");
    frame(HEADERS, 0x4 | u8::from(end_stream), stream, &block)
}

/// A HEADERS frame of a request with `method` and `path` and these other fields, all
/// literals without indexing (names and values under 128 bytes), the client's side left
/// open for a body.
pub fn request(stream: u32, method: &str, path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    let pseudo = [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
    ];
    for (name, value) in pseudo.iter().chain(fields) {
        block.push(0);
        block.push(name.len() as u8);
        block.extend(name.as_bytes());
        block.push(value.len() as u8);
        block.extend(value.as_bytes());
    }
    frame(HEADERS, 0x4, stream, &block)
}

/// A DATA frame on `stream`; `end_stream` closes the client's side.
pub fn data(stream: u32, payload: &[u8], end_stream: bool) -> Vec<u8> {
    frame(DATA, u8::from(end_stream), stream, payload)
}

/// RST_STREAM of `stream` with `code`.
pub fn reset(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// A connection to `addr` that has sent the preface and an empty SETTINGS frame.
pub async fn open(addr: SocketAddr) -> TcpStream {
    open_with(addr, &[]).await
}

/// A connection to `addr` that has sent the preface and SETTINGS with these values.
pub async fn open_with(addr: SocketAddr, settings: &[(u16, u32)]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let payload: Vec<u8> = (settings.iter())
        .flat_map(|(id, value)| id.to_be_bytes().into_iter().chain(value.to_be_bytes()))
        .collect();
    stream.write_all(PREFACE).await.unwrap();
    stream
        .write_all(&frame(SETTINGS, 0, 0, &payload))
        .await
        .unwrap();
    stream
}

/// The next frame: (type, stream, payload); `None` at the end of the connection.
pub async fn next<R: AsyncRead + Unpin>(stream: &mut R) -> Option<(u8, u32, Vec<u8>)> {
    next_flagged(stream)
        .await
        .map(|(kind, _, id, payload)| (kind, id, payload))
}

/// The next frame with its flags: (type, flags, stream, payload).
pub async fn next_flagged<R: AsyncRead + Unpin>(stream: &mut R) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], id, payload))
}

/// The error code of a GOAWAY or RST_STREAM payload.
pub fn code(kind: u8, payload: &[u8]) -> Option<u32> {
    let at = match kind {
        GOAWAY => 4,
        RST_STREAM => 0,
        _ => return None,
    };
    Some(u32::from_be_bytes(
        payload.get(at..at + 4)?.try_into().ok()?,
    ))
}

/// Reads frames until a GOAWAY (its error code) or the end of the connection (`None`).
pub async fn goaway(stream: &mut TcpStream) -> Option<u32> {
    let read = async {
        while let Some((kind, _, payload)) = next(stream).await {
            if kind == GOAWAY {
                return code(kind, &payload);
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the gateway ended the connection")
}

/// The `:status` of an answer's HEADERS block (its first field), from a server that
/// uses no dynamic table (`HEADER_TABLE_SIZE` 0): a static entry, or a literal of
/// three digits, Huffman-coded or not. `None` for anything else.
pub fn status(block: &[u8]) -> Option<u16> {
    let mut at = 0;
    // Dynamic table size updates (001xxxxx), to 0: one byte each.
    while block.get(at).is_some_and(|b| b & 0xe0 == 0x20) {
        at += 1;
    }
    let first = *block.get(at)?;
    if first & 0x80 != 0 {
        let statuses = [
            (8, 200),
            (9, 204),
            (10, 206),
            (11, 304),
            (12, 400),
            (13, 404),
            (14, 500),
        ];
        let index = first & 0x7f;
        return statuses.iter().find(|(i, _)| *i == index).map(|(_, s)| *s);
    }
    // A literal whose name is static entry 8 (`:status`), with or without indexing.
    let named = first == 0x48 || first == 0x08 || first == 0x18;
    let length = *block.get(at + 1)?;
    let value = block.get(at + 2..at + 2 + usize::from(length & 0x7f))?;
    if !named {
        return None;
    }
    let digits = if length & 0x80 == 0 {
        value.to_vec()
    } else {
        huffman_digits(value)?
    };
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// Three digits in HPACK's Huffman code (RFC 7541, appendix B): `0`-`2` are 5 bits
/// (`00000`-`00010`), `3`-`9` are 6 (`011001`-`011111`).
fn huffman_digits(coded: &[u8]) -> Option<Vec<u8>> {
    let bits: Vec<u8> = (coded.iter())
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let number = |bits: &[u8]| bits.iter().fold(0u8, |n, b| n << 1 | b);
    let (mut at, mut digits) = (0, Vec::new());
    while digits.len() < 3 {
        let digit = match bits.get(at..at + 3)? {
            [0, 0, 0] => {
                at += 5;
                number(bits.get(at - 5..at)?)
            }
            [0, 1, 1] => {
                at += 6;
                number(bits.get(at - 6..at)?) - 0x19 + 3
            }
            _ => return None,
        };
        digits.push(b'0' + digit);
    }
    Some(digits)
}

/// What a [`Held`] connection has received so far.
#[derive(Default)]
pub struct Seen {
    /// The server's PINGs, each answered.
    pub pings: AtomicUsize,
    /// Answers (HEADERS on a stream) with a 2xx status, and with any other status.
    pub ok: AtomicUsize,
    pub other: AtomicUsize,
    /// How many answers had each status (0: one [`status`] could not read).
    statuses: Mutex<std::collections::BTreeMap<u16, usize>>,
    /// Streams the server reset.
    pub resets: AtomicUsize,
    /// Bytes of response body received.
    pub data: AtomicUsize,
    /// The last stream id of the server's GOAWAY (0 before one).
    pub last_stream: AtomicU32,
    /// When the GOAWAY came, and its error code.
    goaway: Mutex<Option<(Instant, u32)>>,
    /// When the server ended the connection.
    closed: Mutex<Option<Instant>>,
}

impl Seen {
    pub fn n(counter: &AtomicUsize) -> usize {
        counter.load(Relaxed)
    }

    /// Each status answered, and how many times.
    pub fn statuses(&self) -> std::collections::BTreeMap<u16, usize> {
        self.statuses.lock().unwrap().clone()
    }
}

/// A raw connection that holds what it asks for: it acknowledges the server's SETTINGS
/// and answers its PINGs, so it looks alive, and otherwise only writes what the test
/// writes ([`Held::send`]); it never sends a WINDOW_UPDATE.
pub struct Held {
    pub seen: Arc<Seen>,
    pub opened: Instant,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    reader: JoinHandle<()>,
}

impl Held {
    /// Opens a connection to `addr` announcing `settings` (`(INITIAL_WINDOW_SIZE, 0)`:
    /// no response body may be sent to it), and a header table of 0 (see [`status`]).
    pub async fn open(addr: SocketAddr, settings: &[(u16, u32)]) -> Self {
        let mut settings = settings.to_vec();
        settings.push((HEADER_TABLE_SIZE, 0));
        let (rd, wr) = open_with(addr, &settings).await.into_split();
        let seen = Arc::new(Seen::default());
        let writer = Arc::new(tokio::sync::Mutex::new(wr));
        let reader = tokio::spawn(hold(rd, writer.clone(), seen.clone()));
        Self {
            seen,
            opened: Instant::now(),
            writer,
            reader,
        }
    }

    /// Writes `bytes` (frames); an error once the server has closed.
    pub async fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.lock().await.write_all(bytes).await
    }

    /// When the server's GOAWAY came, and its code.
    pub fn goaway(&self) -> Option<(Instant, u32)> {
        *self.seen.goaway.lock().unwrap()
    }

    /// When the server ended the connection.
    pub fn closed(&self) -> Option<Instant> {
        *self.seen.closed.lock().unwrap()
    }

    /// Waits, at most until `deadline`, for the server to end the connection.
    pub async fn closed_by(&self, deadline: Instant) -> Option<Instant> {
        while self.closed().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.closed()
    }

    /// Waits, at most until `deadline`, for the server's GOAWAY (or the end, without one).
    pub async fn goaway_by(&self, deadline: Instant) -> Option<(Instant, u32)> {
        while self.goaway().is_none() && self.closed().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.goaway()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The reading side of a [`Held`] connection, until the server ends it.
async fn hold(mut rd: OwnedReadHalf, wr: Arc<tokio::sync::Mutex<OwnedWriteHalf>>, seen: Arc<Seen>) {
    while let Some((kind, flags, id, payload)) = next_flagged(&mut rd).await {
        let answer = match kind {
            SETTINGS if flags & ACK == 0 => Some(frame(SETTINGS, ACK, 0, &[])),
            PING if flags & ACK == 0 => {
                seen.pings.fetch_add(1, Relaxed);
                Some(frame(PING, ACK, 0, &payload))
            }
            HEADERS if id != 0 => {
                let status = status(&payload);
                *seen
                    .statuses
                    .lock()
                    .unwrap()
                    .entry(status.unwrap_or(0))
                    .or_default() += 1;
                let counter = match status {
                    Some(200..=299) => &seen.ok,
                    _ => &seen.other,
                };
                counter.fetch_add(1, Relaxed);
                None
            }
            DATA => {
                seen.data.fetch_add(payload.len(), Relaxed);
                None
            }
            RST_STREAM => {
                seen.resets.fetch_add(1, Relaxed);
                None
            }
            GOAWAY => {
                let last = payload.get(..4).map_or(0, |b| {
                    u32::from_be_bytes(b.try_into().unwrap()) & 0x7fff_ffff
                });
                seen.last_stream.store(last, Relaxed);
                let code = code(kind, &payload).unwrap_or(u32::MAX);
                seen.goaway
                    .lock()
                    .unwrap()
                    .get_or_insert((Instant::now(), code));
                None
            }
            _ => None,
        };
        if let Some(answer) = answer {
            // The server may have stopped reading: what it sends is still read.
            let write = async { wr.lock().await.write_all(&answer).await };
            let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
        }
    }
    *seen.closed.lock().unwrap() = Some(Instant::now());
}
