//! An edge for a client the crate does not wrap, built from the public
//! edge kit alone: a line protocol over TCP on loopback, whose server
//! answers `OK` or `BUSY <seconds>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use portcullis::edge::{EdgeCall, Passage, Verdict};
use portcullis::error::RejectReason;
use portcullis::outcome::Outcome;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A line server on loopback: answers each line with what `answer` says
/// for the `n`th request (from 0); counts the requests it saw.
async fn line_server(answer: fn(usize) -> &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(_)) = lines.next_line().await {
                    let n = count.fetch_add(1, Ordering::SeqCst);
                    let reply = format!("{}\n", answer(n));
                    write.write_all(reply.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (addr, seen)
}

/// One request of the line protocol: a line out, a line back.
async fn ask(addr: &str, line: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(format!("{line}\n").as_bytes()).await?;
    let mut reply = String::new();
    BufReader::new(&mut stream).read_line(&mut reply).await?;
    Ok(reply.trim_end().to_owned())
}

/// How the edge judges an answer: `BUSY <s>` is overload that asks the
/// caller to hold off `s` seconds; an I/O error is overload too.
fn judge(answer: &std::io::Result<String>) -> Verdict {
    match answer.as_deref() {
        Ok("OK") => Verdict::of(Outcome::Success),
        Ok(busy) => {
            let seconds = busy.strip_prefix("BUSY ").and_then(|s| s.parse().ok());
            Verdict {
                outcome: Outcome::Overloaded,
                pause: seconds.map(Duration::from_secs),
            }
        }
        Err(_) => Verdict::of(Outcome::Overloaded),
    }
}

#[tokio::test]
async fn an_edge_of_ones_own_admits_judges_and_reports_through_the_public_kit() {
    let (addr, seen) = line_server(|n| if n == 1 { "BUSY 2" } else { "OK" }).await;
    let manager = ThrottleManager::<String>::builder()
        .rate(
            RateConfig::adaptive(10.0)
                .bounds(1.0, 100.0)
                .increase_by(1.0)
                .decrease_factor(0.5),
        )
        .bulkhead(BulkheadConfig::new(1))
        .build()
        .unwrap();

    let passage = EdgeCall::new(&manager, &addr)
        .pass(|| ask(&addr, "GET"), judge)
        .await;
    let Passage::Reported(Ok(reply), verdict) = passage else {
        panic!("{passage:?}");
    };
    assert_eq!((reply.as_str(), verdict.outcome), ("OK", Outcome::Success));
    assert_eq!(manager.key(&addr).rate(), Some(11.0));

    let passage = EdgeCall::new(&manager, &addr)
        .pass(|| ask(&addr, "GET"), judge)
        .await;
    let Passage::Reported(Ok(reply), verdict) = passage else {
        panic!("{passage:?}");
    };
    assert_eq!(reply, "BUSY 2");
    assert_eq!(verdict.pause, Some(Duration::from_secs(2)));
    assert_eq!(
        manager.key(&addr).rate(),
        Some(5.5),
        "overload lowers the rate"
    );

    // The server asked for 2 s: a call that does not wait is refused
    // here, and nothing reaches the server.
    let refused = manager.try_acquire(&addr, Priority::HIGH).unwrap_err();
    assert_eq!(refused.reason(), RejectReason::RateLimited);
    assert!(refused.retry_after().unwrap() > Duration::from_secs(1));
    assert_eq!(seen.load(Ordering::SeqCst), 2);

    // A full bulkhead refuses through the kit, and nothing is sent.
    let busy = manager.acquire("other", Priority::HIGH).await.unwrap();
    let passage = EdgeCall::new(&manager, "other")
        .admit_as(portcullis::edge::AdmitAs::Server)
        .pass(|| ask(&addr, "GET"), judge)
        .await;
    let Passage::Refused(refused) = passage else {
        panic!("{passage:?}");
    };
    assert_eq!(refused.reason(), RejectReason::Full);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    busy.success();
}
