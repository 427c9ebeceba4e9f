//! The named limits, one behaviour each, on virtual time.

use std::time::Duration;

use portcullis::clock::ManualClock;
use portcullis::deadline::TimeLimits;
use portcullis::error::RejectReason;
use portcullis::metered::Cost;
use portcullis::{BulkheadConfig, Priority, RateConfig, ThrottleManager};

/// Requests 60 a minute (burst 10), tokens 6,000 a minute (burst 1,000):
/// 100 tokens a second.
fn metered(clock: &ManualClock) -> ThrottleManager<String> {
    ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(60).burst(10))
        .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// `key` has heard from its provider: the provider's count of its tokens
/// read, a full bucket. A key that has heard is not new, so its first call
/// may spend the burst (see
/// `a_new_key_spends_no_burst_before_its_backend_answers`); the clock moves
/// a millisecond first, since a count read at its very start is none.
fn heard(manager: &ThrottleManager<String>, clock: &ManualClock, key: &str) {
    clock.advance(Duration::from_millis(1));
    assert!(manager.key(key).observe_remaining("tokens", 1_000, None));
}

fn tokens_left(manager: &ThrottleManager<String>, key: &str) -> u32 {
    let tokens = manager.limit("tokens").unwrap();
    tokens.peek(key).map_or(1_000, |left| left.remaining)
}

fn requests_left(manager: &ThrottleManager<String>, key: &str) -> u32 {
    manager.peek(key).map_or(10, |left| left.remaining)
}

#[tokio::test]
async fn the_public_contract_compiles_and_settles()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(60).burst(10)) // requests
        .limit("tokens", RateConfig::per_minute(10_000).burst(2_000))
        .build()?;
    let permit = manager
        .acquire_cost("model-a", Priority::HIGH, Cost::of("tokens", 500))
        .await?;
    permit.settle(Cost::of("tokens", 742));
    permit.success();
    // A new key spends no burst before its first answer: the rest of its
    // 2,000 is earned at 10,000 a minute, less the 242 the call owed.
    let tokens = manager.limit("tokens").unwrap().peek("model-a").unwrap();
    assert_eq!(tokens.remaining, 0);
    assert!(tokens.full_in > Duration::from_secs(13), "{tokens:?}"); // 2,242 at 6 ms each
    assert_eq!(manager.peek("model-a").unwrap().remaining, 9);
    Ok(())
}

/// A new key's first call of a named limit goes at once, and the key earns
/// the rest of the limit's burst at its rate: costs known only from the
/// answers are not spent as a burst of estimates. A call not made gives
/// the room back; a key that has heard from its provider is not new.
#[test]
fn a_new_key_spends_no_burst_before_its_backend_answers() {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let manager = metered(&clock); // tokens: 100 a second, burst 1,000
    let first = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 300))
        .unwrap();
    assert_eq!(tokens_left(&manager, "a"), 0);
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 300))
        .unwrap_err();
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(3)));
    // Settled below its estimate, the call gives back its own tokens only.
    first.settle(Cost::of("tokens", 200));
    first.success();
    assert_eq!(tokens_left(&manager, "a"), 100);
    clock.advance(Duration::from_secs(9));
    assert_eq!(tokens_left(&manager, "a"), 1_000);
    // A first call that is not made gives everything back.
    let unsent = manager
        .try_acquire_cost("b", Priority::HIGH, Cost::of("tokens", 700))
        .unwrap();
    unsent.unsent();
    assert_eq!(tokens_left(&manager, "b"), 1_000);
    // A first call its key refuses (no request left) takes nothing either.
    for _ in 0..10 {
        let batch = manager.try_acquire_cost("c", Priority::HIGH, Cost::requests(1));
        batch.unwrap().success();
    }
    let refused = manager
        .try_acquire_cost("c", Priority::HIGH, Cost::of("tokens", 300))
        .unwrap_err();
    assert_eq!(refused.limit_index(), None);
    assert_eq!(tokens_left(&manager, "c"), 1_000);
    // A key whose provider's count was read spends its burst.
    heard(&manager, &clock, "d");
    for _ in 0..3 {
        manager
            .try_acquire_cost("d", Priority::HIGH, Cost::of("tokens", 300))
            .unwrap()
            .success();
    }
    assert_eq!(tokens_left(&manager, "d"), 100);
}

/// A provider's count of what remains, lower than the key's own, is
/// believed: told 400 of 1,000 tokens and 2 of 10 requests remain, the key
/// admits that much and no more until its limits refill.
#[test]
fn a_providers_count_of_what_remains_holds_the_key_to_it() {
    let clock = ManualClock::new();
    let manager = metered(&clock);
    heard(&manager, &clock, "a");
    assert!(manager.key("a").observe_remaining("tokens", 400, None));
    for _ in 0..4 {
        let permit = manager.try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 100));
        permit.unwrap().success();
    }
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 100))
        .unwrap_err();
    assert_eq!(
        (refused.limit_index(), refused.retry_after()),
        (Some(0), Some(Duration::from_secs(1)))
    );
    // The requests: 6 of 10 left after the four calls, the provider says 2.
    assert!(manager.key("a").observe_remaining("requests", 2, None));
    for _ in 0..2 {
        manager
            .try_acquire_cost("a", Priority::HIGH, Cost::requests(1))
            .unwrap()
            .success();
    }
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::requests(1))
        .unwrap_err();
    assert_eq!(refused.limit_index(), None);
    // A count above the key's own is not believed: its calls in flight are
    // not in it yet.
    assert!(manager.key("a").observe_remaining("tokens", 1_000, None));
    assert_eq!(tokens_left(&manager, "a"), 0);
}

#[test]
fn a_call_refused_by_one_limit_takes_nothing_from_the_others() {
    let clock = ManualClock::new();
    let manager = metered(&clock);
    heard(&manager, &clock, "a");
    manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 900))
        .unwrap()
        .success();
    // The tokens refuse: the request is not taken.
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 200))
        .unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::RateLimited, Some(0))
    );
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(
        (requests_left(&manager, "a"), tokens_left(&manager, "a")),
        (9, 100)
    );
    // The requests refuse: the tokens are not taken.
    for _ in 0..9 {
        manager
            .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 0))
            .unwrap()
            .success();
    }
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 50))
        .unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::RateLimited, None)
    );
    assert_eq!(
        (requests_left(&manager, "a"), tokens_left(&manager, "a")),
        (0, 100)
    );
    // A cost no burst holds: refused at once, naming the limit.
    let refused = manager
        .try_acquire_cost("b", Priority::HIGH, Cost::of("tokens", 1_001))
        .unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::CostAboveBurst, Some(0))
    );
    assert_eq!(requests_left(&manager, "b"), 10);
    // A limit the manager does not have: refused before any limit counts it.
    let refused = manager
        .try_acquire_cost("b", Priority::HIGH, Cost::of("tokenz", 1))
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::UnknownLimit);
    assert_eq!(
        (requests_left(&manager, "b"), tokens_left(&manager, "b")),
        (10, 1_000)
    );
}

#[test]
fn a_bulkhead_that_refuses_gives_back_what_the_limits_took() {
    let clock = ManualClock::new();
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_minute(60).burst(10))
        .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
        .bulkhead(BulkheadConfig::new(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    heard(&manager, &clock, "a");
    let busy = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 100))
        .unwrap();
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 300))
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Full);
    assert_eq!(tokens_left(&manager, "a"), 900);
    busy.success();
}

#[test]
fn settling_owes_the_difference_or_gives_it_back() {
    let clock = ManualClock::new();
    let manager = metered(&clock);
    heard(&manager, &clock, "a");
    let permit = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 500))
        .unwrap();
    permit.settle(Cost::of("tokens", 200));
    assert_eq!(tokens_left(&manager, "a"), 800);
    permit.settle(Cost::of("tokens", 1_500)); // past the burst: owed, 5 s to repay
    assert_eq!(tokens_left(&manager, "a"), 0);
    permit.success();
    let refused = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 100))
        .unwrap_err();
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(6)));
    clock.advance(Duration::from_secs(6));
    manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 100))
        .unwrap()
        .success();
    // A call that never reached the backend gives everything back.
    let unsent = manager
        .try_acquire_cost("b", Priority::HIGH, Cost::of("tokens", 700))
        .unwrap();
    unsent.unsent();
    assert_eq!(
        (requests_left(&manager, "b"), tokens_left(&manager, "b")),
        (10, 1_000)
    );
    // Requests settle only when the settled cost says them.
    let batch = manager
        .try_acquire_cost("c", Priority::HIGH, Cost::requests(4))
        .unwrap();
    batch.settle(Cost::of("tokens", 10));
    assert_eq!(requests_left(&manager, "c"), 6);
    batch.settle(Cost::requests(2));
    assert_eq!(requests_left(&manager, "c"), 8);
    batch.success();
}

/// Issue 80: settling again replaces the last settlement, whatever came
/// before it, and `unsent` gives back every part: an estimate of 100
/// settled at a huge cost and then at 0 holds nothing; one settled at 500
/// and then never sent holds nothing. (The estimate stayed held: the
/// give-back of the charge was counted as moving the estimate's tokens.)
#[test]
fn settling_again_replaces_the_last_settlement_and_unsent_gives_back_all() {
    let clock = ManualClock::new();
    let manager = metered(&clock);
    heard(&manager, &clock, "a");
    let permit = manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 100))
        .unwrap();
    permit.settle(Cost::of("tokens", u32::MAX));
    permit.settle(Cost::of("tokens", 0));
    assert_eq!(tokens_left(&manager, "a"), 1_000);
    permit.success();

    heard(&manager, &clock, "b");
    let permit = manager
        .try_acquire_cost("b", Priority::HIGH, Cost::of("tokens", 100))
        .unwrap();
    permit.settle(Cost::of("tokens", 500));
    assert_eq!(tokens_left(&manager, "b"), 500);
    permit.unsent();
    assert_eq!(tokens_left(&manager, "b"), 1_000);
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_once_for_the_latest_limit() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(1).burst(1))
        .limit("tokens", RateConfig::per_second(100).burst(1_000))
        .build()
        .unwrap();
    manager
        .acquire_cost("a", Priority::HIGH, Cost::of("tokens", 1_000))
        .await
        .unwrap()
        .success();
    // The next request is due in 1 s, 500 tokens in 5 s: one wait, of 5 s.
    let started = tokio::time::Instant::now();
    let permit = manager
        .acquire_cost("a", Priority::HIGH, Cost::of("tokens", 500))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    permit.success();
    // The limits took their parts at once, when both had room.
    let tokens = manager.limit("tokens").unwrap().peek("a").unwrap();
    assert_eq!(tokens.remaining, 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_holds_nothing_and_a_cancelled_one_took_nothing() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(100).burst(100))
        .limit("tokens", RateConfig::per_second(100).burst(1_000))
        .build()
        .unwrap();
    manager
        .acquire_cost("a", Priority::HIGH, Cost::of("tokens", 1_000))
        .await
        .unwrap()
        .success();
    // A large call waits 10 s for its tokens; small ones go before it
    // meanwhile, since it holds nothing while it waits.
    let large = manager.acquire_cost("a", Priority::HIGH, Cost::of("tokens", 1_000));
    let cancelled = tokio::time::timeout(Duration::from_secs(2), large).await;
    assert!(cancelled.is_err());
    let tokens = manager.limit("tokens").unwrap();
    assert_eq!(tokens.peek("a").unwrap().remaining, 200);
    assert_eq!(manager.peek("a").unwrap().remaining, 100); // its request untaken too
    manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 200))
        .unwrap()
        .success();
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_max_wait_or_the_deadline_is_refused_at_once() {
    let manager = ThrottleManager::<String>::builder()
        .rate(RateConfig::per_second(100).burst(100))
        .limit("tokens", RateConfig::per_second(100).burst(1_000))
        .time_limits(TimeLimits::new().max_wait(Duration::from_secs(3)))
        .build()
        .unwrap();
    manager
        .acquire_cost("a", Priority::HIGH, Cost::of("tokens", 1_000))
        .await
        .unwrap()
        .success();
    let started = tokio::time::Instant::now();
    let refused = manager
        .acquire_cost("a", Priority::HIGH, Cost::of("tokens", 500))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.reason(), refused.limit_index()),
        (RejectReason::RateLimited, Some(0))
    );
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(5)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let refused = portcullis::deadline::with_deadline(
        deadline,
        manager.acquire_cost("a", Priority::HIGH, Cost::of("tokens", 200)),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Deadline);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[test]
fn forgetting_a_key_forgets_its_named_limits() {
    let clock = ManualClock::new();
    let manager = metered(&clock);
    manager
        .try_acquire_cost("a", Priority::HIGH, Cost::of("tokens", 900))
        .unwrap()
        .success();
    assert!(manager.key("a").forget());
    assert_eq!(tokens_left(&manager, "a"), 1_000);
    assert!(manager.limit("tokens").unwrap().peek("a").is_none());
}

#[test]
fn bad_limits_are_named_at_build() {
    let problems = |builder: portcullis::builder::ThrottleManagerBuilder<String>| {
        let error = builder.build().unwrap_err();
        (error.problems().iter())
            .map(|problem| format!("{}: {}", problem.field(), problem.message()))
            .collect::<Vec<_>>()
    };
    let rate = || ThrottleManager::<String>::builder().rate(RateConfig::per_minute(60));
    let found = problems(
        rate()
            .limit("tokens", RateConfig::per_minute(6_000))
            .limit("tokens", RateConfig::per_minute(6_000))
            .limit("requests", RateConfig::per_minute(6_000))
            .limit("input tokens", RateConfig::per_minute(6_000))
            .limit("images", RateConfig::per_minute(6_000).burst(0)),
    );
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(
        found[0].starts_with("limit[\"tokens\"]: declared twice"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("limit[\"requests\"]: \"requests\" is the key's own rate"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("limit[\"input tokens\"]: a limit's name is"),
        "{found:#?}"
    );
    assert!(
        found[3].starts_with("limit[\"images\"].burst:"),
        "{found:#?}"
    );
    let found = problems(
        ThrottleManager::<String>::builder()
            .bulkhead(BulkheadConfig::new(4))
            .limit("tokens", RateConfig::per_minute(6_000)),
    );
    assert!(
        found[0].starts_with("limit: named limits count beside the key's rate"),
        "{found:#?}"
    );
}

#[test]
fn shadowed_limits_refuse_nothing_and_count_what_enforcement_refuses() {
    let run = |shadow: bool| {
        let clock = ManualClock::new();
        let manager = ThrottleManager::<String>::builder()
            .rate(RateConfig::per_second(1_000).burst(1_000))
            .limit("tokens", RateConfig::per_second(100).burst(500))
            .shadow(shadow)
            .clock(clock.clone())
            .build()
            .unwrap();
        // Admitted, let through that would have been refused, refused.
        let (mut admitted, mut would_refuse, mut refused) = (0, 0, 0);
        for call in 0..200u32 {
            let cost = Cost::of("tokens", 40 + call * 37 % 200);
            match manager.try_acquire_cost("a", Priority::HIGH, cost) {
                Ok(permit) if permit.would_refuse().is_some() => {
                    would_refuse += 1;
                    permit.success();
                }
                Ok(permit) => {
                    admitted += 1;
                    permit.success();
                }
                Err(_) => refused += 1,
            }
            clock.advance(Duration::from_millis(100 + u64::from(call % 7) * 50));
        }
        (admitted, would_refuse, refused)
    };
    let (enforced, shadowed) = (run(false), run(true));
    assert!(enforced.2 > 20 && enforced.1 == 0, "{enforced:?}");
    assert_eq!(shadowed, (enforced.0, enforced.2, 0));
}
