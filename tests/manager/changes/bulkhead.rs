//! A bulkhead changed on a live key: lowered, its calls in flight finish
//! and none is admitted until fewer than the new limit remain; raised, its
//! waiters are admitted at once; a shorter queue keeps its waiters.

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use portcullis::clock::ManualClock;
use portcullis::error::RejectReason;
use portcullis::manager::Permit;
use portcullis::{BulkheadConfig, Priority, Rejected, ThrottleManager};

fn manager(config: BulkheadConfig) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .bulkhead(config)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// `count` calls of `db` polled once each, and each queued.
fn queued<'m>(
    manager: &'m ThrottleManager<String>,
    count: usize,
    context: &mut Context<'_>,
) -> Vec<Pin<Box<impl Future<Output = Result<Permit<'m>, Rejected>> + 'm>>> {
    let mut waiters: Vec<_> = (0..count)
        .map(|_| Box::pin(manager.acquire("db", Priority::HIGH)))
        .collect();
    for waiter in &mut waiters {
        assert!(waiter.as_mut().poll(context).is_pending());
    }
    waiters
}

#[test]
fn a_limit_lowered_lets_the_calls_in_flight_finish_and_admits_none_until_below_it() {
    let manager = manager(BulkheadConfig::new(8));
    let mut held: Vec<_> = (0..5)
        .map(|_| manager.try_acquire("db", Priority::HIGH).unwrap())
        .collect();
    manager
        .key("db")
        .set_bulkhead(BulkheadConfig::new(2))
        .unwrap();
    assert_eq!(
        manager.key("db").snapshot().unwrap().active,
        Some(5),
        "none cut off"
    );
    for in_flight in [5, 4, 3, 2] {
        let refused = manager.try_acquire("db", Priority::HIGH).unwrap_err();
        assert_eq!(
            refused.reason(),
            RejectReason::Full,
            "{in_flight} in flight"
        );
        held.pop().unwrap().success();
    }
    let admitted = manager.try_acquire("db", Priority::HIGH);
    assert!(admitted.is_ok(), "one in flight, below 2");
    assert!(
        manager.try_acquire("db", Priority::HIGH).is_err(),
        "two: full"
    );
}

#[test]
fn a_limit_raised_admits_the_waiters_at_once() {
    let manager = manager(BulkheadConfig::new(1).queue(4));
    let _first = manager.try_acquire("db", Priority::HIGH).unwrap();
    let mut context = Context::from_waker(Waker::noop());
    let mut waiters = queued(&manager, 3, &mut context);
    assert_eq!(manager.key("db").snapshot().unwrap().queued, Some(3));

    manager
        .key("db")
        .set_bulkhead(BulkheadConfig::new(4).queue(4))
        .unwrap();
    for waiter in &mut waiters {
        let Poll::Ready(permit) = waiter.as_mut().poll(&mut context) else {
            panic!("a waiter still queued under the raised limit");
        };
        permit.unwrap().success();
    }
}

#[test]
fn a_shorter_queue_keeps_its_waiters_and_takes_no_newcomer_until_below_its_length() {
    let manager = manager(BulkheadConfig::new(1).queue(3));
    let first = manager.try_acquire("db", Priority::HIGH).unwrap();
    let mut context = Context::from_waker(Waker::noop());
    let mut waiters = queued(&manager, 3, &mut context);
    manager
        .key("db")
        .set_bulkhead(BulkheadConfig::new(1).queue(1))
        .unwrap();
    assert_eq!(
        manager.key("db").snapshot().unwrap().queued,
        Some(3),
        "none dropped"
    );
    {
        let mut newcomer = pin!(manager.acquire("db", Priority::HIGH));
        let Poll::Ready(refused) = newcomer.as_mut().poll(&mut context) else {
            panic!("a newcomer queued past the new length");
        };
        assert_eq!(refused.unwrap_err().reason(), RejectReason::Full);
    }
    // The waiters are served in turn, each as the one before it ends.
    first.success();
    for waiter in &mut waiters {
        let Poll::Ready(permit) = waiter.as_mut().poll(&mut context) else {
            panic!("a kept waiter was not served");
        };
        permit.unwrap().success();
    }
}

/// Issue 80: the lowered limit holds for the queue too. A slot freed while
/// callers wait goes to one of them only while fewer than the limit in
/// force are in flight: limit 4 with 3 waiting, lowered to 1 (by an
/// override, or by a reload the key's next call finds), admits nobody
/// until all 4 have ended, then one waiter at a time.
#[test]
fn a_limit_lowered_while_callers_wait_hands_them_no_slot_until_below_it() {
    for by_reload in [false, true] {
        let manager = manager(BulkheadConfig::new(4).queue(4));
        let mut held: Vec<_> = (0..4)
            .map(|_| manager.try_acquire("db", Priority::HIGH).unwrap())
            .collect();
        let mut context = Context::from_waker(Waker::noop());
        let mut waiters = queued(&manager, 3, &mut context);
        if by_reload {
            let file = "[default.bulkhead]\nmax_concurrent = 1\nqueue = 4\n";
            manager.reload(toml::from_str(file).unwrap()).unwrap();
            let newcomer = manager.try_acquire("db", Priority::HIGH);
            assert!(newcomer.is_err(), "the key's next call: full");
        } else {
            manager
                .key("db")
                .set_bulkhead(BulkheadConfig::new(1).queue(4))
                .unwrap();
        }
        for in_flight in [4, 3, 2] {
            held.pop().unwrap().success();
            let snapshot = manager.key("db").snapshot().unwrap();
            assert_eq!(snapshot.active, Some(in_flight - 1), "a slot handed on");
            assert_eq!(snapshot.queued, Some(3));
            for waiter in &mut waiters {
                assert!(waiter.as_mut().poll(&mut context).is_pending());
            }
        }
        held.pop().unwrap().success();
        for (served, waiter) in waiters.iter_mut().enumerate() {
            let Poll::Ready(permit) = waiter.as_mut().poll(&mut context) else {
                panic!("waiter {served} not served with none in flight");
            };
            assert_eq!(manager.key("db").snapshot().unwrap().active, Some(1));
            permit.unwrap().success();
        }
    }
}
