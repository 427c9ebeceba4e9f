//! What the pipeline hands a call it admits: a plain call's [`Ticket`],
//! or, for one key of a call charged to several, the ticket and the rate
//! token it took ([`Held`]).

use super::{Admitting, HeldToken, give_back_slot};
use crate::core::Core;
use crate::permit::Ticket;

/// What the pipeline hands a call it admits. A plain call gets its
/// [`Ticket`], and its rate token is spent; one key of a call charged to
/// several ([`Held`]) keeps the token too, to hand back if another key
/// refuses. The pipeline is generic over it so that a plain call carries
/// nothing more.
pub(in crate::manager) trait Admission: Sized {
    /// Whether the call keeps its rate token once admitted.
    const KEEPS_TOKEN: bool;

    fn from_call(call: Admitting, holds_slot: bool) -> Self;

    fn ticket(&self) -> &Ticket;
}

impl Admission for Ticket {
    const KEEPS_TOKEN: bool = false;

    #[inline(always)]
    fn from_call(call: Admitting, holds_slot: bool) -> Self {
        call.admitted(holds_slot)
    }

    #[inline(always)]
    fn ticket(&self) -> &Ticket {
        self
    }
}

/// One key of a call charged to several, admitted: its ticket, and the rate
/// token it took, which goes back if another key refuses the call.
pub(in crate::manager) struct Held {
    pub(in crate::manager) ticket: Ticket,
    token: Option<HeldToken>,
}

impl Admission for Held {
    const KEEPS_TOKEN: bool = true;

    fn from_call(mut call: Admitting, holds_slot: bool) -> Self {
        let token = call.token.take();
        Held {
            ticket: call.admitted(holds_slot),
            token,
        }
    }

    fn ticket(&self) -> &Ticket {
        &self.ticket
    }
}

impl Held {
    /// The call will not happen after all: everything this key gave it
    /// goes back, and no control counts it. Its token returns as a
    /// cancelled wait's does (while no later call has taken one, see
    /// `rate::gcra::cancel`), its slot goes to the head of the queue, and
    /// the key may make room in a full key space.
    pub(in crate::manager) fn withdraw(self, core: &Core) {
        let Held { ticket, token } = self;
        let state = &ticket.state;
        if let Some(token) = token {
            token.give_back(core, state);
        }
        if ticket.holds_slot {
            give_back_slot(state);
        }
        // Neither an outcome nor a slot was counted for the ticket (no
        // permit was made of it), so nothing more is undone.
        core.room
            .call_ended(|| triomphe::Arc::strong_count(state) <= crate::registry::HOLDERS + 1);
    }
}
