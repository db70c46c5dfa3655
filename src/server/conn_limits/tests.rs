//! The limits of one connection ([`super::ConnLimits`]) against real time, in ticks of
//! 100 ms.

use super::*;

#[test]
fn the_reset_bucket_refills_over_a_minute() {
    let start = Instant::now();
    let mut bucket = Bucket::full(3);
    assert!((0..3).all(|_| bucket.take(start)));
    assert!(!bucket.take(start));
    assert!(!bucket.take(start + Duration::from_secs(19)));
    assert!(bucket.take(start + Duration::from_secs(21)));
}

const TICK: Duration = Duration::from_millis(100);

async fn wait(ticks: u32) {
    tokio::time::sleep(TICK * ticks).await;
}

#[tokio::test]
async fn an_idle_connection_leaves_after_idle_timeout_and_not_while_a_request_is_open() {
    let server = ServerConfig {
        idle_timeout: TICK * 5,
        ..ServerConfig::default()
    };
    let conn = Arc::new(ConnLimits::new(
        &server,
        &Arc::new(ByteBudget::new(1 << 20)),
    ));
    let Verdict::Serve(Some(at)) = conn.check() else {
        panic!("an idle connection has a deadline");
    };
    assert_eq!(at, conn.epoch + TICK * 5);
    let open = conn.open();
    wait(6).await;
    let Verdict::Serve(Some(look)) = conn.check() else {
        panic!("a request is open: it serves on");
    };
    assert!(
        look > Instant::now() + TICK * 4,
        "it looks again within idle_timeout"
    );
    drop(open);
    // The end of a request wakes no driver: it finds it at its next look.
    let woken = tokio::time::timeout(Duration::ZERO, conn.changed()).await;
    assert!(
        woken.is_err(),
        "the driver was woken by the end of a request"
    );
    wait(3).await;
    assert!(matches!(conn.check(), Verdict::Serve(Some(_))));
    wait(3).await;
    assert!(matches!(conn.check(), Verdict::Leave(Some(_))));
}

#[tokio::test]
async fn a_connection_told_to_go_closes_only_once_nothing_is_open() {
    let server = ServerConfig {
        write_timeout: TICK * 5,
        http2_max_reset_streams: 1,
        ..ServerConfig::default()
    };
    let conn = Arc::new(ConnLimits::new(
        &server,
        &Arc::new(ByteBudget::new(1 << 20)),
    ));
    let healthy = conn.open();
    conn.abandoned();
    conn.abandoned();
    assert_eq!(conn.check(), Verdict::Leave(None), "past the reset limit");
    wait(8).await;
    assert_eq!(
        conn.check(),
        Verdict::Leave(None),
        "a healthy request is still open past write_timeout: not cut"
    );
    drop(healthy);
    assert!(matches!(conn.check(), Verdict::Leave(Some(_))));
    wait(6).await;
    assert_eq!(
        conn.check(),
        Verdict::Close,
        "nothing open for write_timeout"
    );
}

#[tokio::test]
async fn a_stalled_answer_is_freed_and_its_connection_leaves() {
    let server = ServerConfig {
        write_timeout: TICK * 5,
        ..ServerConfig::default()
    };
    let budget = Arc::new(ByteBudget::new(1 << 20));
    let conn = Arc::new(ConnLimits::new(&server, &budget));
    let _open = conn.open();
    let sending = conn.sending();
    let charge = conn.budget().try_take(1000).unwrap();
    *sending.rest().lock().unwrap() = Some(charge.attach(Bytes::from(vec![0u8; 1000])));
    conn.watch(sending.clone());
    let _waiting_without_bytes = {
        let idle = conn.sending();
        conn.watch(idle.clone());
        idle
    };
    wait(3).await;
    assert!(matches!(conn.check(), Verdict::Serve(Some(_))));
    sending.touch();
    wait(3).await;
    assert!(matches!(conn.check(), Verdict::Serve(Some(_))), "it moved");
    assert_eq!(budget.used(), 1000);
    wait(3).await;
    assert!(matches!(conn.check(), Verdict::Leave(Some(_))));
    assert_eq!(budget.used(), 0, "the unsent bytes were freed");
    wait(6).await;
    assert_eq!(
        conn.check(),
        Verdict::Close,
        "closed write_timeout after the stall, its request still open"
    );
}
