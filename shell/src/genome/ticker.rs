//! The ticker: the node's durable timer wheel and lease reaper loop.
//!
//! Timers and leases live in the store (as effects and claims); this loop only decides
//! *when* to ask the kernel to look. It sleeps until the next deadline the kernel
//! published, or a heartbeat, whichever comes first, then sends `Tick`.

use super::kernel::KernelMsg;
use super::{Genome, now_ms};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Duration;

/// Longest sleep between ticks, so lease expiry and yielded jobs never wait long even if
/// a deadline update were missed.
const HEARTBEAT_MS: u64 = 1_000;

/// The ticker (behaviour).
pub struct Ticker;

/// Its only message.
pub enum TickerMsg {
    /// Sleep until due, tick, repeat.
    Wait,
}

/// The ticker's state.
pub struct TickerState {
    genome: Arc<Genome>,
    /// The deadline a tick was last sent for: not ticked again until the kernel publishes
    /// a new one (or the heartbeat passes), so a slow kernel is not flooded.
    ticked_for: Option<u64>,
    /// When the last tick was sent. The heartbeat counts from here, not from the last
    /// wake-up: the kernel republishes its deadline at every commit, and a heartbeat
    /// restarted by each of those never came while a client polled (a start due at the
    /// very millisecond already ticked for waited for ever).
    last_tick: std::time::Instant,
}

impl Actor for Ticker {
    type Msg = TickerMsg;
    type State = TickerState;
    type Arguments = Arc<Genome>;

    async fn pre_start(
        &self,
        myself: ActorRef<TickerMsg>,
        genome: Arc<Genome>,
    ) -> Result<TickerState, ActorProcessingErr> {
        myself.cast(TickerMsg::Wait)?;
        Ok(TickerState {
            genome,
            ticked_for: None,
            last_tick: std::time::Instant::now(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TickerMsg>,
        TickerMsg::Wait: TickerMsg,
        state: &mut TickerState,
    ) -> Result<(), ActorProcessingErr> {
        let mut stopping = state.genome.stopping.subscribe();
        if *stopping.borrow_and_update() {
            return Ok(());
        }
        let mut deadlines = state.genome.deadline.subscribe();
        let next = *deadlines.borrow_and_update();
        let now = now_ms();
        let heartbeat_ms =
            HEARTBEAT_MS.saturating_sub(state.last_tick.elapsed().as_millis() as u64);
        let sleep_ms = match next {
            Some(deadline) if Some(deadline) != state.ticked_for => {
                deadline.saturating_sub(now).min(heartbeat_ms)
            }
            _ => heartbeat_ms,
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {
                if let Some(kernel) = state.genome.kernel() {
                    let _ = kernel.cast(KernelMsg::Tick);
                }
                state.ticked_for = next;
                state.last_tick = std::time::Instant::now();
            }
            _ = deadlines.changed() => {}
            // Shutdown: stop looping so the actor can stop at once.
            _ = stopping.changed() => return Ok(()),
        }
        myself.cast(TickerMsg::Wait)?;
        Ok(())
    }
}
