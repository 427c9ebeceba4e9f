//! Metered calls: a key's named limits beside its rate, costs stated up
//! front and settled after the call. The public contract as written, what
//! each limit admits (a proptest on virtual time), waiting for the latest
//! limit, and that a refused or cancelled call takes nothing.

mod bound;
mod limits;
