//! Randomized stress: thousands of tasks on real threads acquire with random
//! priorities and give up at random moments, against several keys. No
//! waiter is ever left in the queue unwoken, afterwards every key is idle,
//! and at no instant did any key have more calls in flight than its limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use portcullis::bulkhead::Overflow;
use portcullis::error::RejectReason;
use portcullis::{BulkheadConfig, Priority, ThrottleManager};

const KEYS: [&str; 3] = ["a", "b", "c"];
const MAX_CONCURRENT: u32 = 3;
const TASKS: u64 = 3_000;
const QUEUE_TIMEOUT: Duration = Duration::from_secs(20);

/// A deterministic stream of numbers per task (xorshift64*).
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % sides
    }
}

/// One call counted as in flight for as long as it lives.
struct InFlight<'a>(&'a AtomicU32);

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicU32, peak: &AtomicU32) -> Self {
        let now = count.fetch_add(1, Ordering::AcqRel) + 1;
        peak.fetch_max(now, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn run(overflow: Overflow) {
    let manager = ThrottleManager::<String>::builder()
        .bulkhead(
            BulkheadConfig::new(MAX_CONCURRENT)
                .queue(5)
                // Far longer than any wait here (holds are at most 1.5 ms):
                // it must never fire. A short one would rescue a waiter that
                // is never woken, and a lost wake-up would pass unseen.
                .queue_timeout(QUEUE_TIMEOUT)
                .overflow(overflow),
        )
        .build()
        .unwrap();
    let in_flight: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let peak: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (manager, in_flight, peak, admitted) = (
            manager.clone(),
            Arc::clone(&in_flight),
            Arc::clone(&peak),
            Arc::clone(&admitted),
        );
        tasks.push(tokio::spawn(async move {
            let mut dice = Dice(task * 0x9E37_79B9 + 1);
            let k = dice.roll(3) as usize;
            let priority = Priority::new(dice.roll(4) as u8);
            let give_up_after = Duration::from_micros(dice.roll(4_000));
            let hold = Duration::from_micros(dice.roll(1_500));
            let call = async {
                let asked = std::time::Instant::now();
                let permit = match manager.acquire(KEYS[k], priority).await {
                    Ok(permit) => {
                        // Waits here are milliseconds; one this long was
                        // rescued by the queue timeout's timer, not woken.
                        let waited = asked.elapsed();
                        assert!(
                            waited < QUEUE_TIMEOUT / 4,
                            "admitted after {waited:?}: a waiter was never woken"
                        );
                        permit
                    }
                    Err(rejected) => {
                        assert_ne!(
                            rejected.reason(),
                            RejectReason::QueueTimeout,
                            "a waiter sat in the queue for {QUEUE_TIMEOUT:?}: never woken"
                        );
                        return;
                    }
                };
                // Declared after the permit, so dropped before it, also
                // when the call is cancelled mid-way.
                let counted = InFlight::enter(&in_flight[k], &peak[k]);
                admitted.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(hold).await;
                drop(counted);
                permit.success();
            };
            if dice.roll(3) == 0 {
                // Cancelled at a random moment: while waiting in the queue,
                // or while holding the slot.
                let _ = tokio::time::timeout(give_up_after, call).await;
            } else {
                call.await;
            }
        }));
        if task % 20 == 0 {
            // Arrivals spread over about 150 ms: bursts of 20.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    for task in tasks {
        tokio::time::timeout(QUEUE_TIMEOUT + Duration::from_secs(10), task)
            .await
            .expect("no task hangs")
            .unwrap();
    }
    for (k, key) in KEYS.iter().enumerate() {
        let status = manager.key(*key).snapshot().unwrap();
        assert_eq!(
            status.active,
            Some(0),
            "{overflow:?}: key {key} still has calls in flight"
        );
        assert_eq!(
            status.queued,
            Some(0),
            "{overflow:?}: key {key} still has waiters"
        );
        let peak = peak[k].load(Ordering::Acquire);
        assert!(
            peak <= MAX_CONCURRENT,
            "{overflow:?}: key {key} reached {peak} in flight"
        );
    }
    assert!(
        admitted.load(Ordering::Relaxed) > TASKS / 10,
        "the keys kept admitting calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_new_under_churn() {
    let _alone = crate::support::alone();
    run(Overflow::RejectNew).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_oldest_under_churn() {
    let _alone = crate::support::alone();
    run(Overflow::DropOldest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_lowest_priority_under_churn() {
    let _alone = crate::support::alone();
    run(Overflow::DropLowestPriority).await;
}
