//! A raw HTTP/2 client that writes frames by hand, as an abusive client would (no flow
//! control, no limits obeyed), and reads what the gateway sends back frame by frame:
//! the frame-level tests (`http2_frames.rs`) and the chaos suite's HTTP/2 floods.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
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

/// A connection to `addr` that has sent the preface and an empty SETTINGS frame.
pub async fn open(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(PREFACE).await.unwrap();
    stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    stream
}

/// The next frame: (type, stream, payload); `None` at the end of the connection.
pub async fn next<R: AsyncRead + Unpin>(stream: &mut R) -> Option<(u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    Some((head[3], id, payload))
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
