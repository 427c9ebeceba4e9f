//! Fair queuing on a shared key's bulkhead, on virtual time: many flows
//! (users, tenants) calling one key get equal shares of its slots whatever
//! the shape of their demand, its capacity is used in full, and a flow
//! that sends more than its share does not slow those that send less.
//! The runs are the simulator's (`examples/simulate/flows.rs`); each rule
//! fails with the queue first come first served, as its twin shows.

// The simulator prints more of the runs than these tests read.
#[allow(dead_code)]
#[path = "../../examples/simulate/flows.rs"]
mod flows;

use flows::{CROWD_SHARE, Discipline};

#[tokio::test(start_paused = true)]
async fn forty_flows_of_equal_demand_share_the_key_evenly_and_use_all_of_it() {
    let crowd = flows::crowd(Discipline::Fair).await;
    assert_eq!(crowd.flows.len(), 40);
    for (flow, tally) in &crowd.flows {
        let off = (tally.served as f64 - CROWD_SHARE).abs() / CROWD_SHARE;
        assert!(
            off <= 0.10,
            "{flow} served {} calls, {:.0} % off its share of {CROWD_SHARE}",
            tally.served,
            off * 100.0
        );
    }
    let used = crowd.used;
    assert!(
        used >= 0.95,
        "the key's capacity used: {:.1} %",
        used * 100.0
    );
}

#[tokio::test(start_paused = true)]
async fn first_come_first_served_gives_the_bursty_flows_less() {
    // What fair queuing is for: the same demand, first come first served.
    let crowd = flows::crowd(Discipline::FirstComeFirstServed).await;
    let (steady, bursty) = (crowd.flows["flow-0"].served, crowd.flows["flow-1"].served);
    assert!(bursty * 10 < steady * 9, "bursty {bursty}, steady {steady}");
}

/// The light flows beside the heavy one, served as `discipline`, lose at
/// most `max_lost` of their calls, and wait at p99 at most 1.5x what they
/// wait without it.
async fn light_flows_unhurt(discipline: Discipline, max_lost: f64) {
    let alone = flows::light_flows(false, discipline).await.light;
    let beside = flows::light_flows(true, discipline).await.light;
    let lost = beside.lost();
    assert!(
        lost <= max_lost,
        "the light flows lost {:.1} % of their calls",
        lost * 100.0
    );
    let (alone, beside) = (alone.wait(0.99), beside.wait(0.99));
    assert!(
        beside.as_secs_f64() <= 1.5 * alone.as_secs_f64(),
        "the light flows' p99 wait: {beside:?} beside the heavy flow, {alone:?} without it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_heavy_flow_beside_light_ones_costs_them_neither_calls_nor_waiting() {
    light_flows_unhurt(Discipline::Fair, 0.01).await;
}

#[tokio::test(start_paused = true)]
async fn first_come_first_served_makes_the_light_flows_wait_behind_the_heavy_one() {
    let fifo = Discipline::FirstComeFirstServed;
    let alone = flows::light_flows(false, fifo).await.light.wait(0.99);
    let beside = flows::light_flows(true, fifo).await.light.wait(0.99);
    assert!(
        beside > alone * 2,
        "{beside:?} beside the heavy flow, {alone:?} without it"
    );
}

#[tokio::test(start_paused = true)]
async fn under_codel_a_heavy_flow_sheds_its_own_waiters_not_the_light_ones() {
    // CoDel per flow: the heavy flow's standing queue is its own to shed.
    light_flows_unhurt(Discipline::FairCodel, 0.02).await;
}
