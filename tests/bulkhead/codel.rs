//! CoDel and adaptive LIFO on the bulkhead's queue, on virtual time: under
//! a sustained overload the calls served wait about the target, not the
//! whole queue; the calls that waited the target are dropped by reason;
//! priorities keep their order; and once the load falls the queue drains
//! and serves first come first served again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, ThrottleManager};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// Issue 55's public contract, exactly as written (it must compile with
/// no cargo feature).
mod contract {
    use portcullis::deadline::with_deadline;
    use portcullis::error::RejectReason;
    use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    use std::time::Duration;

    pub(super) async fn contract() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let manager = ThrottleManager::<String>::builder()
            .bulkhead(
                BulkheadConfig::new(8)
                    .queue(64)
                    .codel(Duration::from_millis(5), Duration::from_millis(100)),
            )
            .build()?;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
        match with_deadline(deadline, manager.acquire("svc", Priority::HIGH)).await {
            Ok(_permit) => {}
            Err(refused) => assert!(matches!(
                refused.reason(),
                RejectReason::Deadline | RejectReason::Full
            )),
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_contract_compiles_and_runs() {
    contract::contract().await.unwrap();
}

/// 8 slots, each call 20 ms: 400 calls a second. A queue of 64, with a
/// queue timeout of 1 s; CoDel's target and interval as Facebook's.
fn server(codel: bool) -> ThrottleManager<String> {
    queue(codel, true)
}

/// [`server`], choosing adaptive LIFO too.
fn queue(codel: bool, lifo: bool) -> ThrottleManager<String> {
    let mut config = BulkheadConfig::new(8)
        .queue(64)
        .queue_timeout(Duration::from_secs(1));
    if codel {
        config = config.codel(5 * MS, 100 * MS).adaptive_lifo(lifo);
    }
    ThrottleManager::<String>::builder()
        .bulkhead(config)
        .build()
        .unwrap()
}

/// What the offered calls met: each served call's wait in the queue, and
/// each refusal's reason, in the order they came.
#[derive(Debug, Default)]
struct Met {
    waits: Vec<(Duration, Duration)>, // (arrival since start, wait)
    refused: Vec<RejectReason>,
}

/// Offers one call every `every` for `run`, each holding its slot 20 ms.
async fn offer(manager: &ThrottleManager<String>, every: Duration, run: Duration) -> Met {
    offer_at(manager, every, run, Priority::HIGH).await
}

/// [`offer`] at `priority`.
async fn offer_at(
    manager: &ThrottleManager<String>,
    every: Duration,
    run: Duration,
    priority: Priority,
) -> Met {
    let met = Arc::new(Mutex::new(Met::default()));
    let start = Instant::now();
    let mut calls = Vec::new();
    while start.elapsed() < run {
        let (manager, met) = (manager.clone(), Arc::clone(&met));
        let arrived = start.elapsed();
        calls.push(tokio::spawn(async move {
            let came = Instant::now();
            match manager.acquire_owned("svc", priority).await {
                Ok(permit) => {
                    met.lock().unwrap().waits.push((arrived, came.elapsed()));
                    tokio::time::sleep(20 * MS).await;
                    permit.success();
                }
                Err(refused) => met.lock().unwrap().refused.push(refused.reason()),
            }
        }));
        tokio::time::sleep(every).await;
    }
    for call in calls {
        call.await.unwrap();
    }
    Arc::try_unwrap(met).unwrap().into_inner().unwrap()
}

fn percentile(waits: &[Duration], p: f64) -> Duration {
    let mut sorted = waits.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

#[tokio::test(start_paused = true)]
async fn under_twice_its_capacity_a_codel_queue_keeps_its_waits_near_the_target() {
    // 800 calls a second for 3 s against 400.
    let fifo = offer(
        &server(false),
        1_250 * Duration::from_micros(1),
        Duration::from_secs(3),
    )
    .await;
    let codel = offer(
        &server(true),
        1_250 * Duration::from_micros(1),
        Duration::from_secs(3),
    )
    .await;
    let codel_fifo = offer(
        &queue(true, false),
        1_250 * Duration::from_micros(1),
        Duration::from_secs(3),
    )
    .await;
    let settled = |met: &Met| -> Vec<Duration> {
        met.waits
            .iter()
            .filter(|(at, _)| *at >= Duration::from_secs(1))
            .map(|(_, wait)| *wait)
            .collect()
    };
    let (fifo_waits, codel_waits) = (settled(&fifo), settled(&codel));
    let (fifo_p50, codel_p50) = (percentile(&fifo_waits, 0.5), percentile(&codel_waits, 0.5));
    let (fifo_p90, codel_p90) = (percentile(&fifo_waits, 0.9), percentile(&codel_waits, 0.9));
    let codel_fifo_p50 = percentile(&settled(&codel_fifo), 0.5);
    println!(
        "served after 1 s: FIFO {} (p50 wait {fifo_p50:?}, p90 {fifo_p90:?}), CoDel {} (p50 {codel_p50:?}, p90 {codel_p90:?})",
        fifo_waits.len(),
        codel_waits.len()
    );
    // A full FIFO queue of 64 in front of 400 a second: 160 ms for everyone.
    assert!(fifo_p50 >= 150 * MS, "FIFO p50 {fifo_p50:?}");
    // CoDel: the standing wait is the target's, not the queue's.
    assert!(codel_p50 <= 5 * MS, "CoDel p50 {codel_p50:?}");
    assert!(codel_p90 <= 10 * MS, "CoDel p90 {codel_p90:?}");
    // Newest first serves calls that waited less than first come first
    // served under the same drops, which waits about the target.
    println!("CoDel without adaptive LIFO: p50 wait {codel_fifo_p50:?}");
    assert!(codel_fifo_p50 <= 5 * MS, "{codel_fifo_p50:?}");
    assert!(
        codel_p50 < codel_fifo_p50,
        "{codel_p50:?} vs {codel_fifo_p50:?}"
    );
    // The slots stayed busy: as many served as FIFO, within a few.
    assert!(
        codel_waits.len() + 20 >= fifo_waits.len(),
        "{} vs {}",
        codel_waits.len(),
        fifo_waits.len()
    );
    // What was not served was dropped for its wait, or found the queue full.
    assert!(codel.refused.contains(&RejectReason::QueueOverloaded));
    assert!(
        codel
            .refused
            .iter()
            .all(|reason| matches!(reason, RejectReason::QueueOverloaded | RejectReason::Full))
    );
    assert!(!fifo.refused.contains(&RejectReason::QueueOverloaded));
}

#[tokio::test(start_paused = true)]
async fn once_the_load_falls_the_queue_drains_and_serves_first_come_first_served() {
    let manager = server(true);
    // Overload it for a second, then let it drain.
    offer(
        &manager,
        1_250 * Duration::from_micros(1),
        Duration::from_secs(1),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Now 8 busy calls and 5 waiters in a row: served in the order they came.
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut busy = Vec::new();
    for _ in 0..8 {
        busy.push(manager.acquire_owned("svc", Priority::HIGH).await.unwrap());
    }
    let mut waiters = Vec::new();
    for n in 0..5 {
        let (manager, order) = (manager.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let permit = manager.acquire_owned("svc", Priority::HIGH).await.unwrap();
            order.lock().unwrap().push(n);
            permit
        }));
        tokio::time::sleep(MS).await;
    }
    for permit in busy {
        permit.success();
    }
    for waiter in waiters {
        waiter.await.unwrap().success();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_queue_serves_the_newest_of_the_most_important_first() {
    let manager = server(true);
    // A standing queue of LOW calls: overloaded, served newest first.
    let overload = tokio::spawn({
        let manager = manager.clone();
        async move {
            let every = 1_250 * Duration::from_micros(1);
            offer_at(&manager, every, Duration::from_secs(1), Priority::LOW).await
        }
    });
    tokio::time::sleep(900 * MS).await;
    // A HIGH call into it is served at the next slot, ahead of every LOW
    // one however new: priorities keep their order.
    let start = Instant::now();
    let high = manager.acquire("svc", Priority::HIGH).await.unwrap();
    let waited = start.elapsed();
    high.success();
    let low = overload.await.unwrap();
    assert!(waited <= 3 * MS, "the HIGH call waited {waited:?}");
    // The LOW calls served under overload waited little: the newest first.
    let late: Vec<Duration> = low
        .waits
        .iter()
        .filter(|(at, _)| *at >= 500 * MS)
        .map(|(_, w)| *w)
        .collect();
    assert!(
        percentile(&late, 0.5) <= 5 * MS,
        "{:?}",
        percentile(&late, 0.5)
    );
}

#[tokio::test(start_paused = true)]
async fn codel_works_with_a_learned_limit_too() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::adaptive()
                .bounds(1, 8)
                .queue(64)
                .queue_timeout(Duration::from_secs(1))
                .codel(5 * MS, 100 * MS),
        )
        .build()
        .unwrap();
    // Far over what 8 slots of 20 ms serve: the learned limit reaches its
    // bound, and the queue stands.
    let met = offer(
        &manager,
        500 * Duration::from_micros(1),
        Duration::from_secs(3),
    )
    .await;
    let late: Vec<Duration> = met
        .waits
        .iter()
        .filter(|(at, _)| *at >= Duration::from_secs(2))
        .map(|(_, w)| *w)
        .collect();
    assert!(!late.is_empty());
    assert!(
        percentile(&late, 0.5) <= 5 * MS,
        "p50 {:?}",
        percentile(&late, 0.5)
    );
    assert!(met.refused.contains(&RejectReason::QueueOverloaded));
}

/// Spawns a wait for a slot at `priority`, `at` from `start`: when it got
/// its permit (from `start`), or why it was refused.
fn waiter_at(
    manager: &ThrottleManager<String>,
    start: Instant,
    at: Duration,
    priority: Priority,
) -> tokio::task::JoinHandle<Result<(Duration, portcullis::manager::OwnedPermit), RejectReason>> {
    let manager = manager.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(start + at).await;
        match manager.acquire_owned("svc", priority).await {
            Ok(permit) => Ok((start.elapsed(), permit)),
            Err(refused) => Err(refused.reason()),
        }
    })
}

/// A HIGH waiter that has waited the target is not dropped at the hand-off
/// that would serve a younger LOW one: CoDel drops only waiters no more
/// important than the one it serves.
#[tokio::test(start_paused = true)]
async fn codel_never_drops_a_waiter_at_a_hand_off_that_serves_a_less_important_one() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(8)
                .queue_timeout(Duration::from_secs(10))
                .codel(5 * MS, 100 * MS),
        )
        .build()
        .unwrap();
    let start = Instant::now();
    let first = manager.acquire("svc", Priority::LOW).await.unwrap();
    let low_1 = waiter_at(&manager, start, Duration::ZERO, Priority::LOW);
    // Waits throughout, so that the queue never empties (a moment of empty
    // queue tells CoDel there is no standing queue).
    let low_0 = waiter_at(&manager, start, MS, Priority::LOW);
    let high_1 = waiter_at(&manager, start, 50 * MS, Priority::HIGH);
    let high_2 = waiter_at(&manager, start, 60 * MS, Priority::HIGH);
    tokio::time::sleep_until(start + 10 * MS).await;
    first.success(); // to LOW 1, who waited 10 ms: CoDel's interval begins
    let (_, low_1) = low_1.await.unwrap().unwrap();
    tokio::time::sleep_until(start + 115 * MS).await;
    // To HIGH 1, who waited 65 ms: an interval whose every wait was above
    // the target, so the queue is overloaded from here.
    low_1.success();
    let (_, high_1) = high_1.await.unwrap().unwrap();
    let low_2 = waiter_at(&manager, start, 128 * MS, Priority::LOW);
    tokio::time::sleep_until(start + 130 * MS).await;
    // HIGH 2 has waited 70 ms, LOW 2 (the newest) 2 ms: HIGH 2 is served.
    high_1.success();
    let (served_at, high_2) = high_2
        .await
        .unwrap()
        .expect("HIGH 2 is served, not dropped");
    assert_eq!(served_at, 130 * MS);
    high_2.success();
    // LOW 0, who had waited the target, was dropped at that hand-off; LOW
    // 2, who had not, was not.
    assert_eq!(
        low_0.await.unwrap().err(),
        Some(RejectReason::QueueOverloaded)
    );
    let low_2 = low_2.await.unwrap();
    assert!(
        matches!(&low_2, Ok((at, _)) if *at == 130 * MS)
            || low_2.as_ref().err() == Some(&RejectReason::QueueOverloaded),
        "{:?}",
        low_2.as_ref().map(|(at, _)| at)
    );
}

/// CoDel's rule for a newcomer to an overloaded queue: it is refused with
/// `QueueOverloaded` once it has waited the target, not the configured
/// queue timeout, even while no slot frees (every slot held for a second).
#[tokio::test(start_paused = true)]
async fn a_newcomer_to_an_overloaded_queue_waits_the_target_even_while_no_slot_frees() {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(1)
                .queue(64)
                .queue_timeout(Duration::from_secs(1))
                .codel(5 * MS, 100 * MS),
        )
        .build()
        .unwrap();
    // Calls of 20 ms offered every 10 ms: a standing queue. Once 250 ms
    // have passed, every call admitted holds its slot for a second.
    let start = Instant::now();
    let hold = move || {
        if start.elapsed() < 250 * MS {
            20 * MS
        } else {
            Duration::from_secs(1)
        }
    };
    for _ in 0..30 {
        let manager = manager.clone();
        tokio::spawn(async move {
            if let Ok(permit) = manager.acquire("svc", Priority::HIGH).await {
                tokio::time::sleep(hold()).await;
                permit.success();
            }
        });
        tokio::time::sleep(10 * MS).await;
    }
    tokio::time::sleep(25 * MS).await;
    let snapshot = manager.key("svc").snapshot().unwrap();
    assert_eq!(snapshot.active, Some(1), "the slot is held for a second");
    let arrived = Instant::now();
    let refused = manager.acquire("svc", Priority::HIGH).await.unwrap_err();
    assert_eq!(refused.reason(), RejectReason::QueueOverloaded);
    assert_eq!(
        arrived.elapsed(),
        5 * MS,
        "the target, not the queue timeout"
    );
}
