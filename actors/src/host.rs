//! [`HomeHost`]: the duties of whoever hosts a home's [`JobPath`], written once for the
//! node's kernel and for the simulator's nodes.
//!
//! - **Replies wait for durability.** Every answer that reports a change — a submit, a
//!   continue, a claim handed to another node, a renewal, a recorded completion — is
//!   deferred ([`HomeHost::after_durable`]) and released only when the batch holding the
//!   change is durable ([`HomeHost::durable`]). Nobody outside this process may hear of
//!   a write a crash could take back.
//! - **Group commit.** [`HomeHost::seal`] takes everything the job path wrote since the
//!   last seal as one batch, with the replies waiting for it. The host makes sealed
//!   batches durable in order (the node: commit + fdatasync on a blocking thread, one at
//!   a time, while new work gathers into the next; the simulator: a later flush event
//!   that covers every batch sealed before it) and then calls `durable(seq)`, which
//!   releases the replies of every batch up to `seq`.
//! - **Run leases.** A seat on this node gets its claim at once
//!   ([`HomeHost::claim_local`]): a crash kills it together with the claim. A command
//!   the seat runs outlives a crash, so it starts only once its process group is
//!   recorded where the next life finds it ([`HomeHost::started`]); that life stops it
//!   first. A holder on
//!   another node — a child the effect is placed on — hears of its claims, renewals and
//!   completions only once they are durable ([`HomeHost::claim_remote`],
//!   [`HomeHost::renew`], [`HomeHost::complete`]); otherwise a restarted home could hand
//!   the effect to someone else while the first holder believes its lease live.
//!
//! The host owns its I/O; this type only decides what may be said when. It does not own
//! the job path (commands without a running node use the path directly), so every duty
//! takes it by reference.

use crate::bt::{EffectRequest, Outcome};
use crate::path::records::RunningGroup;
use crate::path::{ClaimedEffect, CompleteError, Completed, JobPath, Notice};
use crate::store::{Store, WriteBatch};
use std::collections::VecDeque;

/// One sealed batch: what the host must make durable, and what it must act on.
#[derive(Debug)]
pub struct Seal<R> {
    /// Sequence number; pass it to [`HomeHost::durable`] once the batch is durable.
    pub seq: u64,
    /// The writes, for one atomic commit.
    pub batch: WriteBatch,
    /// What the job path asks its host to do (wake seats, stop effects, ...).
    pub notices: Vec<Notice>,
    /// Replies the host may send at once. Always empty, unless a planted bug says
    /// otherwise (feature `mutations`).
    pub early: Vec<R>,
}

/// What a tick of the job path's clocks did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticked {
    /// Durable timers that fired.
    pub fired: usize,
    /// Leases that expired (their effects are ready again).
    pub reaped: usize,
    /// Jobs resumed after yielding their tick budget.
    pub resumed: usize,
    /// Jobs started by interests.
    pub started: usize,
}

impl Ticked {
    /// True when anything happened.
    pub fn any(&self) -> bool {
        self.fired + self.reaped + self.resumed + self.started > 0
    }
}

/// A deliberate bug planted in the host duties, to prove the simulator catches it
/// (feature `mutations`; nothing in a node ever sets one).
#[cfg(feature = "mutations")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostMutation {
    /// Replies go out when their batch is sealed, before it is durable.
    AckBeforeDurable,
}

/// See the module docs. `R` is the host's reply: a closure, a message to send.
#[derive(Debug)]
pub struct HomeHost<R> {
    waiting: Vec<R>,
    sealed: VecDeque<(u64, Vec<R>)>,
    next_seq: u64,
    #[cfg(feature = "mutations")]
    mutation: Option<HostMutation>,
}

impl<R> Default for HomeHost<R> {
    fn default() -> Self {
        HomeHost::new()
    }
}

impl<R> HomeHost<R> {
    /// A host with nothing pending.
    pub fn new() -> HomeHost<R> {
        HomeHost {
            waiting: Vec::new(),
            sealed: VecDeque::new(),
            next_seq: 1,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Plants a bug (see [`HostMutation`]).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<HostMutation>) {
        self.mutation = mutation;
    }

    /// Defers `reply` until everything written so far is durable.
    pub fn after_durable(&mut self, reply: R) {
        self.waiting.push(reply);
    }

    /// Releases `reply` too when the batch `seq` (sealed already) is durable: for a
    /// reply that depends on what that seal said (a watcher of a job the batch settles).
    /// A batch already durable releases it at the next [`HomeHost::durable`] call.
    pub fn attach(&mut self, seq: u64, reply: R) {
        match self.sealed.iter_mut().find(|(s, _)| *s == seq) {
            Some((_, replies)) => replies.push(reply),
            None => self.waiting.push(reply),
        }
    }

    /// Hands over the replies of the sealed batch `seq`, for a host that makes batches
    /// durable one at a time and in order (the node's kernel): it carries them with the
    /// batch and lets them out the moment that batch is durable, on the committing
    /// thread, rather than after one more trip through its mailbox. The duty is the
    /// same — none may go out before the batch is durable — and so is the order.
    pub fn carry(&mut self, seq: u64) -> Vec<R> {
        match self.sealed.iter().position(|(s, _)| *s == seq) {
            Some(at) => self.sealed.remove(at).map(|(_, r)| r).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// True when a seal would carry writes or replies.
    pub fn has_pending(&self, path: &JobPath) -> bool {
        path.has_writes() || !self.waiting.is_empty()
    }

    /// Batches sealed and not yet durable.
    pub fn in_flight(&self) -> usize {
        self.sealed.len()
    }

    /// Seals what the job path wrote since the last seal, with the replies waiting for
    /// it. The host commits `batch` atomically, makes it durable, then calls
    /// [`HomeHost::durable`] with `seq`.
    pub fn seal(&mut self, path: &mut JobPath) -> Seal<R> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let batch = path.take_batch();
        let notices = path.take_notices();
        let replies = std::mem::take(&mut self.waiting);
        #[cfg(feature = "mutations")]
        if self.mutation == Some(HostMutation::AckBeforeDurable) {
            self.sealed.push_back((seq, Vec::new()));
            return Seal {
                seq,
                batch,
                notices,
                early: replies,
            };
        }
        self.sealed.push_back((seq, replies));
        Seal {
            seq,
            batch,
            notices,
            early: Vec::new(),
        }
    }

    /// Every batch up to `seq` is durable: their replies may go out, in order.
    pub fn durable(&mut self, seq: u64) -> Vec<R> {
        let mut released = Vec::new();
        while let Some((first, _)) = self.sealed.front() {
            if *first > seq {
                break;
            }
            let (_, replies) = self.sealed.pop_front().expect("a first batch");
            released.extend(replies);
        }
        released
    }

    /// The batches sealed since the last durable one will never be durable (the
    /// commit failed, the host crashed): their replies are dropped, unsent. Their
    /// askers hear nothing, exactly as if this host had died before answering.
    pub fn lost(&mut self) -> usize {
        let dropped: usize = self.sealed.drain(..).map(|(_, r)| r.len()).sum();
        dropped + std::mem::take(&mut self.waiting).len()
    }

    // ----- run leases -----

    /// Claims the oldest ready effect `accept` takes, for a seat of this node. Answered
    /// at once: a seat here dies with the node, so it can never outlive the claim.
    ///
    /// The claim's writes are unforced ([`JobPath::unforced`]): they ask for no commit
    /// of their own and ride with the next batch that must be durable — the effect's
    /// completion, or, for a command, its process group's record (the command waits at
    /// its gate for that). A crash before then loses a claim nobody outside heard of:
    /// the seat died with it, and the next life finds the effect ready. So an effect
    /// run in this process costs one commit between its job's step and its completion's
    /// step, not two.
    pub fn claim_local(
        &mut self,
        path: &mut JobPath,
        now: u64,
        holder: &str,
        accept: &dyn Fn(&str, &EffectRequest) -> bool,
    ) -> Option<ClaimedEffect> {
        path.unforced(|path| path.claim(now, holder, accept))
    }

    /// Claims up to `max` ready effects `accept` takes, for a holder on another node;
    /// `reply` gets them once the claims are durable.
    pub fn claim_remote(
        &mut self,
        path: &mut JobPath,
        now: u64,
        holder: &str,
        max: usize,
        accept: &dyn Fn(&str, &EffectRequest) -> bool,
        reply: impl FnOnce(Vec<ClaimedEffect>) -> R,
    ) {
        let mut claimed = Vec::new();
        while claimed.len() < max {
            match path.claim(now, holder, accept) {
                Some(effect) => claimed.push(effect),
                None => break,
            }
        }
        self.after_durable(reply(claimed));
    }

    /// Extends a claim's lease; `reply` gets the new expiry (or the refusal) once it is
    /// durable. `from`: for a renewal reported by another node, the holder it came from,
    /// refused unless it holds the claim (`JobPath::check_holder`).
    pub fn renew(
        &mut self,
        path: &mut JobPath,
        now: u64,
        key: &str,
        token: u64,
        from: Option<&str>,
        reply: impl FnOnce(Result<u64, CompleteError>) -> R,
    ) {
        let result = from
            .map_or(Ok(()), |holder| path.check_holder(key, token, holder))
            .and_then(|()| path.renew(now, key, token));
        self.after_durable(reply(result));
    }

    /// Records an effect's outcome under its claim's token; `reply` hears the verdict
    /// once it is durable. `from` as for [`HomeHost::renew`].
    #[allow(clippy::too_many_arguments)]
    pub fn complete(
        &mut self,
        path: &mut JobPath,
        now: u64,
        key: &str,
        token: u64,
        outcome: Outcome,
        node: Option<String>,
        from: Option<&str>,
        reply: impl FnOnce(Result<Completed, CompleteError>) -> R,
    ) {
        let result = from
            .map_or(Ok(()), |holder| path.check_holder(key, token, holder))
            .and_then(|()| path.complete(now, key, token, outcome, node));
        self.after_durable(reply(result));
    }

    /// Gives a claim back (its placement was refused): the effect is ready again.
    pub fn release(
        &mut self,
        path: &mut JobPath,
        key: &str,
        token: u64,
    ) -> Result<(), CompleteError> {
        path.release(key, token)
    }

    /// A command is about to run `key` under claim `token` in process group `group`, held
    /// at its gate: `Err` when the claim is no longer current (it must not start). The
    /// record is unforced — it rides with the next batch — because the host keeps its
    /// own copy where a crash of the host process cannot take it back (the node: a file
    /// written before the gate opens, `live_groups`); the host opens the gate once the
    /// request the command runs for is durable. A node that dies while the command runs
    /// finds its group at the next boot and stops it.
    pub fn started(
        &mut self,
        path: &mut JobPath,
        key: &str,
        group: RunningGroup,
    ) -> Result<(), CompleteError> {
        path.unforced(|path| path.record_group(key, group))
    }

    /// The command of `key` under claim `token` has exited: its group is forgotten with
    /// the next batch that must be durable (unforced: no reply, nothing outside waits on
    /// it, and the completion that follows commits it). A crash first leaves the record
    /// of a group that is gone; the next life finds no such process and drops it.
    pub fn exited(&mut self, path: &mut JobPath, key: &str, token: u64) {
        path.unforced(|path| path.forget_group(key, token));
    }

    /// Runs the job path's clocks at `now`: durable timers, lease expiry, yielded jobs,
    /// interests.
    pub fn tick(&mut self, path: &mut JobPath, now: u64, store: &dyn Store) -> Ticked {
        Ticked {
            fired: path.fire_timers(now),
            reaped: path.reap_leases(now),
            resumed: path.resume_yielded(now),
            started: path.fire_interests(now, store),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::JobPathConfig;
    use crate::store::MemoryStore;

    fn path(store: &MemoryStore) -> JobPath {
        JobPath::open(store, JobPathConfig::default(), 7)
            .expect("a memory store opens")
            .0
    }

    #[test]
    fn replies_wait_for_their_batch_and_leave_in_order() {
        let store = MemoryStore::new();
        let mut path = path(&store);
        let mut host: HomeHost<&str> = HomeHost::new();
        host.after_durable("first");
        let one = host.seal(&mut path);
        host.after_durable("second");
        let two = host.seal(&mut path);
        assert!(one.early.is_empty() && two.early.is_empty());
        assert_eq!(host.in_flight(), 2);
        assert!(host.durable(one.seq - 1).is_empty(), "nothing durable yet");
        assert_eq!(host.durable(one.seq), vec!["first"]);
        host.after_durable("third");
        let three = host.seal(&mut path);
        // One flush covering everything sealed releases every batch up to it.
        assert_eq!(host.durable(three.seq), vec!["second", "third"]);
        assert_eq!(host.in_flight(), 0);
        let _ = two;
    }

    #[test]
    fn a_lost_batch_never_answers() {
        let store = MemoryStore::new();
        let mut path = path(&store);
        let mut host: HomeHost<u32> = HomeHost::new();
        host.after_durable(1);
        let sealed = host.seal(&mut path);
        host.after_durable(2);
        assert_eq!(host.lost(), 2);
        assert!(host.durable(sealed.seq).is_empty());
    }
}
