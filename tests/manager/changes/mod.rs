//! Limits changed on a live manager: what each control keeps across a
//! change, a reload of the whole file, and shadow mode.

mod bulkhead;
mod rate;
mod reload;
mod shadow;
mod throttle;
mod under_load;
