//! The supervisor actor: hosts `palm_actors::supervisor::SupervisorCore` on ractor.
//!
//! Children are started from factories, in order, linked to the supervisor; they are
//! stopped in reverse order. When one exits, the core decides: ignore, restart a set
//! (after stopping the ones it names, in reverse order), or escalate — stop everything
//! and fail, so the supervisor's own supervisor (or the process) sees it.

use palm_actors::supervisor::{ChildSpec, Decision, Exit, Intensity, Strategy, SupervisorCore};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info, warn};

/// How long a child gets to stop before the supervisor moves on.
const CHILD_STOP_MS: u64 = 30_000;

/// A future that starts a child.
pub type StartFuture<'a> = Pin<Box<dyn Future<Output = Result<ActorCell, SpawnErr>> + Send + 'a>>;

/// Knows how to (re)start one child.
pub trait ChildFactory: Send + Sync + 'static {
    /// Name and restart policy.
    fn spec(&self) -> ChildSpec;
    /// Starts the child linked to `supervisor`.
    fn start(&self, supervisor: ActorCell) -> StartFuture<'_>;
}

/// A child factory from a closure.
pub struct FnChild<F> {
    spec: ChildSpec,
    start: F,
}

impl<F> FnChild<F>
where
    F: Fn(ActorCell) -> StartFuture<'static> + Send + Sync + 'static,
{
    /// A child named `spec.name`, started by `start`.
    pub fn factory(spec: ChildSpec, start: F) -> Arc<dyn ChildFactory> {
        Arc::new(FnChild { spec, start })
    }
}

impl<F> ChildFactory for FnChild<F>
where
    F: Fn(ActorCell) -> StartFuture<'static> + Send + Sync + 'static,
{
    fn spec(&self) -> ChildSpec {
        self.spec.clone()
    }
    fn start(&self, supervisor: ActorCell) -> StartFuture<'_> {
        (self.start)(supervisor)
    }
}

/// The supervisor (behaviour).
pub struct Supervisor;

/// What it supervises, and how.
pub struct SupervisorArgs {
    /// Name, for logs.
    pub name: String,
    /// Strategy.
    pub strategy: Strategy,
    /// Restart intensity.
    pub intensity: Intensity,
    /// Children, in start order.
    pub children: Vec<Arc<dyn ChildFactory>>,
    /// Records `start NAME` / `stop NAME` lines (tests check the order).
    pub log: Option<Arc<Mutex<Vec<String>>>>,
}

/// Questions tests and the node may ask.
pub enum SupervisorMsg {
    /// The running children (by index; `None` while stopped).
    // Asked by the tests; kept in the protocol for introspection tools.
    #[cfg_attr(not(test), allow(dead_code))]
    Children(ractor::RpcReplyPort<Vec<Option<ActorCell>>>),
}

/// The supervisor's state.
pub struct SupervisorState {
    name: String,
    core: SupervisorCore,
    factories: Vec<Arc<dyn ChildFactory>>,
    cells: Vec<Option<ActorCell>>,
    stopping: HashSet<ractor::ActorId>,
    log: Option<Arc<Mutex<Vec<String>>>>,
}

fn now_ms() -> u64 {
    super::now_ms()
}

impl SupervisorState {
    fn note(&self, line: String) {
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    }

    async fn start_child(&mut self, index: usize, myself: &ActorCell) -> Result<(), SpawnErr> {
        let name = self.core.children()[index].name.clone();
        let cell = self.factories[index].start(myself.clone()).await?;
        self.note(format!("start {name}"));
        self.cells[index] = Some(cell);
        Ok(())
    }

    async fn stop_child(&mut self, index: usize) {
        if let Some(cell) = self.cells[index].take() {
            let name = self.core.children()[index].name.clone();
            self.stopping.insert(cell.get_id());
            if let Err(err) = cell
                .stop_and_wait(
                    Some("supervisor".into()),
                    Some(Duration::from_millis(CHILD_STOP_MS)),
                )
                .await
            {
                warn!(child = name, %err, "child did not stop in time; killing it");
                cell.kill();
            }
            self.note(format!("stop {name}"));
        }
    }

    async fn stop_all(&mut self) {
        for index in self.core.stop_order() {
            self.stop_child(index).await;
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let specs = args.children.iter().map(|c| c.spec()).collect();
        let mut state = SupervisorState {
            name: args.name,
            core: SupervisorCore::new(args.strategy, args.intensity, specs),
            cells: vec![None; args.children.len()],
            factories: args.children,
            stopping: HashSet::new(),
            log: args.log,
        };
        for index in state.core.start_order() {
            if let Err(err) = state.start_child(index, &myself.get_cell()).await {
                state.stop_all().await;
                return Err(format!(
                    "{}: cannot start {}: {err}",
                    state.name,
                    state.core.children()[index].name
                )
                .into());
            }
        }
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        state.stop_all().await;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        message: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Children(reply) => {
                let _ = reply.send(state.cells.clone());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, exit) = match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (
                cell,
                reason.map_or(Exit::Normal, |r| {
                    if r == "supervisor" {
                        Exit::Normal
                    } else {
                        Exit::Abnormal(r)
                    }
                }),
            ),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Exit::Abnormal(err.to_string())),
            _ => return Ok(()),
        };
        if state.stopping.remove(&cell.get_id()) {
            return Ok(());
        }
        let Some(index) = state
            .cells
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.get_id() == cell.get_id()))
        else {
            return Ok(());
        };
        state.cells[index] = None;
        let name = state.core.children()[index].name.clone();
        match state.core.handle_exit(now_ms(), index, &exit) {
            Decision::Ignore => {
                info!(
                    supervisor = state.name,
                    child = name,
                    "child exited; not restarted"
                );
            }
            Decision::Restart { stop, start } => {
                if let Exit::Abnormal(reason) = &exit {
                    warn!(
                        supervisor = state.name,
                        child = name,
                        reason,
                        "child failed; restarting"
                    );
                }
                state.note(format!("exit {name}"));
                for index in stop {
                    state.stop_child(index).await;
                }
                for index in start {
                    if let Err(err) = state.start_child(index, &myself.get_cell()).await {
                        let child = state.core.children()[index].name.clone();
                        error!(supervisor = state.name, child, %err, "restart failed; escalating");
                        state.stop_all().await;
                        return Err(format!("{}: cannot restart {child}: {err}", state.name).into());
                    }
                }
            }
            Decision::Escalate { reason } => {
                error!(
                    supervisor = state.name,
                    reason, "restart intensity exceeded; escalating"
                );
                state.note(format!("escalate {name}"));
                state.stop_all().await;
                return Err(format!("{}: {reason}", state.name).into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palm_actors::supervisor::Restart;
    use ractor::ActorRef;

    /// A child that fails or exits on command.
    struct Worker;

    enum WorkerMsg {
        Fail,
        Exit,
    }

    impl Actor for Worker {
        type Msg = WorkerMsg;
        type State = ();
        type Arguments = ();

        async fn pre_start(
            &self,
            _: ActorRef<WorkerMsg>,
            (): (),
        ) -> Result<(), ActorProcessingErr> {
            Ok(())
        }

        async fn handle(
            &self,
            myself: ActorRef<WorkerMsg>,
            message: WorkerMsg,
            (): &mut (),
        ) -> Result<(), ActorProcessingErr> {
            match message {
                WorkerMsg::Fail => Err("told to fail".into()),
                WorkerMsg::Exit => {
                    myself.stop(None);
                    Ok(())
                }
            }
        }
    }

    fn worker(name: &str, restart: Restart) -> Arc<dyn ChildFactory> {
        FnChild::factory(
            ChildSpec {
                name: name.to_owned(),
                restart,
            },
            |supervisor| {
                Box::pin(async move {
                    Actor::spawn_linked(None, Worker, (), supervisor)
                        .await
                        .map(|(actor, _)| actor.get_cell())
                })
            },
        )
    }

    struct Harness {
        sup: ActorRef<SupervisorMsg>,
        join: tokio::task::JoinHandle<()>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Harness {
        async fn new(strategy: Strategy, intensity: Intensity, restarts: &[Restart]) -> Harness {
            let log = Arc::new(Mutex::new(Vec::new()));
            let names = ["a", "b", "c"];
            let children = names
                .iter()
                .zip(restarts)
                .map(|(name, restart)| worker(name, *restart))
                .collect();
            let (sup, join) = Actor::spawn(
                None,
                Supervisor,
                SupervisorArgs {
                    name: "test".into(),
                    strategy,
                    intensity,
                    children,
                    log: Some(Arc::clone(&log)),
                },
            )
            .await
            .expect("supervisor starts");
            Harness { sup, join, log }
        }

        async fn child(&self, index: usize) -> ActorRef<WorkerMsg> {
            let cells = ractor::call!(self.sup, SupervisorMsg::Children).expect("children");
            ActorRef::from(cells[index].clone().expect("child running"))
        }

        fn take_log(&self) -> Vec<String> {
            std::mem::take(&mut *self.log.lock().expect("log"))
        }

        /// Waits until the log has `n` lines (supervision is asynchronous).
        async fn settle(&self, n: usize) -> Vec<String> {
            for _ in 0..200 {
                if self.log.lock().expect("log").len() >= n {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.take_log()
        }
    }

    const PERMANENT: [Restart; 3] = [Restart::Permanent; 3];

    #[tokio::test]
    async fn starts_in_order_and_stops_in_reverse() {
        let h = Harness::new(Strategy::OneForOne, Intensity::default(), &PERMANENT).await;
        assert_eq!(h.take_log(), ["start a", "start b", "start c"]);
        h.sup.stop_and_wait(None, None).await.expect("stop");
        assert_eq!(h.take_log(), ["stop c", "stop b", "stop a"]);
    }

    #[tokio::test]
    async fn one_for_one_restarts_only_the_failed_child() {
        let h = Harness::new(Strategy::OneForOne, Intensity::default(), &PERMANENT).await;
        h.take_log();
        h.child(1).await.cast(WorkerMsg::Fail).expect("cast");
        assert_eq!(h.settle(2).await, ["exit b", "start b"]);
        h.child(1)
            .await
            .cast(WorkerMsg::Fail)
            .expect("the restarted child is live");
        assert_eq!(h.settle(2).await, ["exit b", "start b"]);
    }

    #[tokio::test]
    async fn one_for_all_restarts_everyone_in_order() {
        let h = Harness::new(Strategy::OneForAll, Intensity::default(), &PERMANENT).await;
        h.take_log();
        h.child(1).await.cast(WorkerMsg::Fail).expect("cast");
        assert_eq!(
            h.settle(6).await,
            [
                "exit b", "stop c", "stop a", "start a", "start b", "start c"
            ]
        );
    }

    #[tokio::test]
    async fn rest_for_one_restarts_the_failed_child_and_those_after_it() {
        let h = Harness::new(Strategy::RestForOne, Intensity::default(), &PERMANENT).await;
        h.take_log();
        h.child(1).await.cast(WorkerMsg::Fail).expect("cast");
        assert_eq!(
            h.settle(4).await,
            ["exit b", "stop c", "start b", "start c"]
        );
        h.child(0).await.cast(WorkerMsg::Fail).expect("cast");
        assert_eq!(
            h.settle(6).await,
            [
                "exit a", "stop c", "stop b", "start a", "start b", "start c"
            ]
        );
    }

    #[tokio::test]
    async fn too_many_restarts_escalate() {
        let intensity = Intensity {
            restarts_max: 2,
            period_ms: 60_000,
        };
        let h = Harness::new(Strategy::OneForOne, intensity, &PERMANENT).await;
        h.take_log();
        for _ in 0..2 {
            h.child(0).await.cast(WorkerMsg::Fail).expect("cast");
            assert_eq!(h.settle(2).await, ["exit a", "start a"]);
        }
        h.child(0).await.cast(WorkerMsg::Fail).expect("cast");
        let Harness { join, log, .. } = h;
        tokio::time::timeout(Duration::from_secs(5), join)
            .await
            .expect("supervisor stops")
            .expect("join");
        let log = std::mem::take(&mut *log.lock().expect("log"));
        assert_eq!(
            log,
            ["escalate a", "stop c", "stop b"],
            "the rest stop in reverse order"
        );
    }

    #[tokio::test]
    async fn a_transient_child_that_exits_normally_stays_stopped() {
        let h = Harness::new(
            Strategy::OneForOne,
            Intensity::default(),
            &[Restart::Transient, Restart::Permanent, Restart::Permanent],
        )
        .await;
        h.take_log();
        h.child(0).await.cast(WorkerMsg::Exit).expect("cast");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            h.take_log().is_empty(),
            "no restart for a normal exit of a transient child"
        );
        let cells = ractor::call!(h.sup, SupervisorMsg::Children).expect("children");
        assert!(cells[0].is_none());
        assert!(cells[1].is_some());
    }
}
