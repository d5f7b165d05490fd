//! What a settled run leaves behind: no input partition read short of its end
//! (`stuck-partition`), no open transaction (`open-transactions`), no timer in the store
//! (`timers-left`); and that the run settled within its budget (`unsettled`). Also, from the
//! whole run, that no timer put lost to a delete of the same stamp (`lost-timer-put`: an
//! owner's put after its own delete of the timer, in the same second, which the store keeps
//! deleted; see `crate::stamp_order`).

use crate::sim::invariant::Invariant;
use crate::sim::world::World;

use super::unconsumed_inputs;

/// Checked at the end of every run (a run that did not settle reports what is left).
pub(super) fn check_quiescence(add: &mut impl FnMut(Invariant, String), w: &World, settled: bool) {
    for stuck in unconsumed_inputs(w) {
        add(Invariant::StuckPartition, stuck);
    }
    for t in w.cluster.txns.values() {
        add(
            Invariant::OpenTransactions,
            format!(
                "txn {} of {} open since +{}ms",
                t.number,
                t.transactional_id,
                (t.started_at - w.start).num_milliseconds()
            ),
        );
    }
    for timer in w.store.timers.iter() {
        add(
            Invariant::TimersLeft,
            format!(
                "timer {} of {} due +{}ms still in the store",
                timer.timer_id,
                timer.execution_id,
                (timer.due_at - w.start).num_milliseconds()
            ),
        );
    }
    for lost in &w.store.lost_timer_puts {
        add(Invariant::LostTimerPut, lost.clone());
    }
    if !settled {
        add(
            Invariant::Unsettled,
            format!(
                "the run did not settle within its budget; unconsumed: {:?}; open txns: {}; store timers: {}{}",
                unconsumed_inputs(w),
                w.cluster.txns.len(),
                w.store.timers.len(),
                if w.faults.triggers && !w.trig_settled() {
                    format!(
                        "; trigger workers: unconsumed {:?}, group {:?}",
                        w.trig_unconsumed(),
                        w.cluster.trigger_group
                    )
                } else {
                    String::new()
                }
            ),
        );
    }
}
