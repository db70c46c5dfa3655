//! The upstream clients, tested: idle connections closed, base path and target joined.

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

#[tokio::test]
async fn idle_upstream_connections_are_closed_after_the_idle_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // One exchange, then how long the client kept the connection open after it.
    let upstream = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = socket.read(&mut buf).await.unwrap();
        (socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await)
            .unwrap();
        let answered = Instant::now();
        while let Ok(1..) = socket.read(&mut buf).await {}
        answered.elapsed()
    });
    let idle = Duration::from_millis(200);
    let client = client_with_idle(tls::shared(false).unwrap(), UpstreamProtocol::Http1, idle);
    let request = Request::get(format!("http://{addr}/")).body(Body::empty());
    let response = client.request(request.unwrap()).await.unwrap();
    assert_eq!(
        &response.into_body().collect().await.unwrap().to_bytes()[..],
        b"ok"
    );
    let open = tokio::time::timeout(Duration::from_secs(5), upstream)
        .await
        .expect("the idle upstream connection was not closed")
        .unwrap();
    assert!(
        open >= idle.mul_f32(0.9),
        "closed after {open:?}, before it was idle for {idle:?}"
    );
    drop(client);
}

#[test]
fn joins_base_path_and_target() {
    let o: Uri = "/v1/payments?x=1".parse().unwrap();
    let plain: Uri = "http://127.0.0.1:3000".parse().unwrap();
    assert_eq!(
        upstream_uri(&plain, &o).to_string(),
        "http://127.0.0.1:3000/v1/payments?x=1"
    );
    let based: Uri = "http://127.0.0.1:3000/api/".parse().unwrap();
    assert_eq!(
        upstream_uri(&based, &o).to_string(),
        "http://127.0.0.1:3000/api/v1/payments?x=1"
    );
}
