//! Model checks of the hand-off and of cancellation, every interleaving
//! loom can find: `RUSTFLAGS="--cfg portcullis_loom" cargo test --release
//! --lib loom`.

use super::*;
use crate::bulkhead::config::Overflow;
use loom::sync::Arc;
use loom::thread;

fn settings() -> BulkheadSettings {
    BulkheadSettings {
        max_concurrent: 1,
        learned: None,
        max_queued: 2,
        queue_timeout: None,
        overflow: Overflow::RejectNew,
        codel: None,
        fair: false,
    }
}

/// [`settings`], its queue served round the flows.
fn fair_settings() -> BulkheadSettings {
    BulkheadSettings {
        fair: true,
        ..settings()
    }
}

/// A waiter of one level, for `flow`.
fn of_flow(flow: &str) -> Waiter {
    Waiter {
        flow: Some(crate::priority::Flow::of(flow)),
        ..Waiter::first_level()
    }
}

/// Gets a slot, waiting if queued; returns with it held.
fn acquire(bulkhead: &Bulkhead) {
    match bulkhead
        .enter(&settings(), Waiter::first_level())
        .expect("room in the queue")
    {
        SlotAnswer::Granted(_) => {}
        SlotAnswer::Queued(id) => {
            loom::future::block_on(QueuedWait::new(bulkhead, 0, id)).expect("granted")
        }
    }
}

#[test]
fn a_released_slot_reaches_the_waiter() {
    loom::model(|| {
        let bulkhead = Arc::new(Bulkhead::default());
        bulkhead.try_acquire(&settings()).unwrap();
        let waiter = {
            let bulkhead = Arc::clone(&bulkhead);
            thread::spawn(move || {
                acquire(&bulkhead);
                assert_eq!(bulkhead.load().active, 1);
                bulkhead.release();
            })
        };
        bulkhead.release();
        waiter.join().unwrap();
        assert_eq!(bulkhead.load(), Load::default());
    });
}

#[test]
fn a_waiter_cancelled_while_the_slot_is_released_never_keeps_it() {
    loom::model(|| {
        let bulkhead = Arc::new(Bulkhead::default());
        bulkhead.try_acquire(&settings()).unwrap();
        let quitter = {
            let bulkhead = Arc::clone(&bulkhead);
            thread::spawn(move || {
                match bulkhead.enter(&settings(), Waiter::first_level()).unwrap() {
                    SlotAnswer::Granted(_) => bulkhead.release(),
                    // Cancelled at once: the future is dropped unpolled.
                    SlotAnswer::Queued(id) => drop(QueuedWait::new(&bulkhead, 0, id)),
                }
            })
        };
        bulkhead.release();
        quitter.join().unwrap();
        assert_eq!(bulkhead.load(), Load::default());
    });
}

#[test]
fn a_slot_handed_to_a_cancelled_waiter_reaches_the_next() {
    loom::model(|| {
        let bulkhead = Arc::new(Bulkhead::default());
        bulkhead.try_acquire(&settings()).unwrap();
        let SlotAnswer::Queued(first) = bulkhead.enter(&settings(), Waiter::first_level()).unwrap()
        else {
            panic!("the slot is taken");
        };
        let patient = {
            let bulkhead = Arc::clone(&bulkhead);
            thread::spawn(move || {
                acquire(&bulkhead);
                bulkhead.release();
            })
        };
        let quitter = {
            let bulkhead = Arc::clone(&bulkhead);
            thread::spawn(move || drop(QueuedWait::new(&bulkhead, 0, first)))
        };
        bulkhead.release();
        quitter.join().unwrap();
        patient.join().unwrap();
        assert_eq!(bulkhead.load(), Load::default());
    });
}

#[test]
fn at_a_fair_queue_a_slot_handed_to_a_cancelled_waiter_reaches_the_other_flow() {
    loom::model(|| {
        let bulkhead = Arc::new(Bulkhead::default());
        let settings = fair_settings();
        bulkhead.try_acquire(&settings).unwrap();
        let SlotAnswer::Queued(first) = bulkhead.enter(&settings, of_flow("a")).unwrap() else {
            panic!("the slot is taken");
        };
        let patient = {
            let bulkhead = Arc::clone(&bulkhead);
            thread::spawn(move || {
                match bulkhead.enter(&fair_settings(), of_flow("b")).unwrap() {
                    SlotAnswer::Granted(_) => {}
                    SlotAnswer::Queued(id) => {
                        loom::future::block_on(QueuedWait::new(&bulkhead, 0, id)).expect("granted")
                    }
                }
                bulkhead.release();
            })
        };
        let quitter = {
            let bulkhead = Arc::clone(&bulkhead);
            thread::spawn(move || drop(QueuedWait::new(&bulkhead, 0, first)))
        };
        bulkhead.release();
        quitter.join().unwrap();
        patient.join().unwrap();
        assert_eq!(bulkhead.load(), Load::default());
    });
}
