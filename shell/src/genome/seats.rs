//! Seats: N claimers that drain ready effects concurrently.
//!
//! A seat asks the kernel for an effect, runs it (see `runner.rs`), reports the outcome,
//! and asks again; with nothing ready it sleeps until the kernel signals new work. The
//! [`SeatBoard`] is what seats share: the wake-up signal, what each seat is doing, and a
//! cancel handle per running effect so the kernel can stop a halted effect's process.

use super::kernel::KernelMsg;
use super::{Genome, now_ms, runner};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How long an idle seat sleeps before asking again even without a signal (a safety net
/// against a lost wake-up; signals are the normal path).
const IDLE_POLL_MS: u64 = 500;

#[derive(Clone, Debug)]
struct Busy {
    key: String,
    job: String,
    since: u64,
}

/// State shared by the seats of one node.
pub struct SeatBoard {
    /// Signalled when effects become ready (or when claiming stops).
    pub notify: Notify,
    slots: Mutex<Vec<Option<Busy>>>,
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
}

impl SeatBoard {
    /// A board for `count` seats.
    pub fn new(count: usize) -> SeatBoard {
        SeatBoard {
            notify: Notify::new(),
            slots: Mutex::new(vec![None; count]),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Seats of the node.
    pub fn total(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Seats running an effect.
    pub fn busy(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|s| s.is_some())
            .count()
    }

    /// Registers a running effect; returns the receiver its runner watches for a cancel.
    pub fn start(&self, seat: usize, key: &str, job: &str) -> watch::Receiver<bool> {
        let (sender, receiver) = watch::channel(false);
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), sender);
        if let Some(slot) = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(seat)
        {
            *slot = Some(Busy {
                key: key.to_owned(),
                job: job.to_owned(),
                since: now_ms(),
            });
        }
        receiver
    }

    /// Unregisters a finished effect.
    pub fn finish(&self, seat: usize, key: &str) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(slot) = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(seat)
        {
            *slot = None;
        }
    }

    /// Asks the runner of `key` (if it runs here) to stop its process.
    pub fn cancel(&self, key: &str) {
        if let Some(sender) = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
        {
            let _ = sender.send(true);
        }
    }

    /// Cancels every running effect (end of the shutdown grace period).
    pub fn cancel_all(&self) {
        for sender in self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let _ = sender.send(true);
        }
    }

    /// Seats for vitality: total, busy, idle, and what each busy one runs.
    pub fn to_json(&self) -> Value {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms();
        let busy: Vec<Value> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                slot.as_ref().map(|b| {
                    json!({"seat": i, "effect": b.key, "job": b.job, "running_ms": now.saturating_sub(b.since)})
                })
            })
            .collect();
        json!({
            "total": slots.len(),
            "busy": busy.len(),
            "idle": slots.len() - busy.len(),
            "running": busy,
        })
    }
}

/// A seat (behaviour). Its state is its index.
pub struct Seat;

/// Arguments of a seat.
pub struct SeatArgs {
    /// The node.
    pub genome: Arc<Genome>,
    /// Seat number.
    pub index: usize,
}

/// A seat's only message: look for work.
pub enum SeatMsg {
    /// Claim and run, or wait for a signal.
    Poll,
}

/// A seat's state.
pub struct SeatState {
    genome: Arc<Genome>,
    index: usize,
    holder: String,
}

impl Actor for Seat {
    type Msg = SeatMsg;
    type State = SeatState;
    type Arguments = SeatArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SeatMsg>,
        args: SeatArgs,
    ) -> Result<SeatState, ActorProcessingErr> {
        myself.cast(SeatMsg::Poll)?;
        Ok(SeatState {
            holder: format!("{}/seat-{}", args.genome.info.name, args.index),
            genome: args.genome,
            index: args.index,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SeatMsg>,
        SeatMsg::Poll: SeatMsg,
        state: &mut SeatState,
    ) -> Result<(), ActorProcessingErr> {
        let genome = Arc::clone(&state.genome);
        if !genome.accepting_work() {
            return Ok(());
        }
        let Some(kernel) = genome.kernel() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            myself.cast(SeatMsg::Poll)?;
            return Ok(());
        };
        // Register for the wake-up before asking, so a signal sent between "nothing
        // ready" and the wait is not lost.
        let notified = genome.seats.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let holder = state.holder.clone();
        let claimed = kernel
            .call(
                |reply| KernelMsg::Claim { holder, reply },
                Some(Duration::from_secs(30)),
            )
            .await;
        match claimed {
            Ok(ractor::rpc::CallResult::Success(Some(effect))) => {
                runner::run(&genome, state.index, &kernel, effect).await;
            }
            Ok(ractor::rpc::CallResult::Success(None)) => {
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS)) => {}
                }
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
        myself.cast(SeatMsg::Poll)?;
        Ok(())
    }
}
