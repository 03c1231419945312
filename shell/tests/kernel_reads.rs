//! The kernel against a store whose commits can be held open. Its one read answered
//! without a commit: a `wait` for a settled job whose writes are all durable is answered
//! while a commit is in flight, and one whose writes that commit holds is not answered
//! before it is durable. And retention's removal of an ended job's artifacts, which
//! waits for the commit that drops the job's journal.

use palm_actors::store::{MemoryStore, Store, StoreError, Table, Visit, WriteBatch};
use palm_api::protocol::{FlowArg, Request, Response};
use palm_node::genome::kernel::{Kernel, KernelMsg};
use palm_node::genome::provider::Registry;
use palm_node::genome::{Genome, NodeInfo, NodeSettings};
use ractor::{Actor, ActorRef};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A memory store whose commits wait while it is held.
#[derive(Default)]
struct HeldStore {
    inner: MemoryStore,
    held: Mutex<bool>,
    released: Condvar,
    /// A commit is waiting for the hold to be released.
    blocked: AtomicBool,
    /// Commits applied.
    commits: AtomicUsize,
}

/// Releases the hold when dropped: a failing assertion must not leave the kernel's
/// committing thread waiting forever (the test's runtime waits for it as it shuts down).
struct Hold(Arc<HeldStore>);

impl Hold {
    fn on(store: &Arc<HeldStore>) -> Hold {
        *store.held.lock().expect("hold") = true;
        Hold(Arc::clone(store))
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        *self.0.held.lock().expect("hold") = false;
        self.0.released.notify_all();
    }
}

impl Store for HeldStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(table, key)
    }

    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        self.inner.scan(table, start, end, visit)
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let mut held = self.held.lock().expect("hold");
        while *held {
            self.blocked.store(true, Ordering::SeqCst);
            held = self.released.wait(held).expect("hold");
        }
        self.blocked.store(false, Ordering::SeqCst);
        self.inner.commit(batch)?;
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }

    fn describe(&self) -> String {
        "a memory store whose commits can be held".to_owned()
    }
}

const PARKED: &str =
    "name: parked\ntree:\n  sequence:\n    - wait: { key: go }\n    - set: { done: true }\n";

const ENDS: &str = "name: ends\ntree:\n  set: { done: true }\n";

fn genome_over(
    store: &Arc<HeldStore>,
    data: &std::path::Path,
    settings: NodeSettings,
) -> Arc<Genome> {
    let info = NodeInfo {
        name: "kernel-test".to_owned(),
        profile: "all-in-one".to_owned(),
        data: data.to_owned(),
        pid: std::process::id(),
        started_at: 0,
        embedded: true,
    };
    Genome::new(
        info,
        settings,
        Arc::clone(store) as Arc<dyn Store>,
        Registry::default(),
    )
}

async fn call(kernel: &ActorRef<KernelMsg>, request: Request) -> Response {
    ractor::call_t!(kernel, KernelMsg::Call, 10_000, request).expect("the kernel answers")
}

async fn submit(kernel: &ActorRef<KernelMsg>, source: &str) -> String {
    let response = call(
        kernel,
        Request::Submit {
            flow: FlowArg::Source {
                source: source.to_owned(),
                origin: "test.yaml".to_owned(),
            },
            input: Default::default(),
            args: Vec::new(),
            started_by: None,
            node: None,
        },
    )
    .await;
    assert!(response.ok, "submit: {response:?}");
    response.result.expect("a result")["job"]
        .as_str()
        .expect("a job id")
        .to_owned()
}

fn wait_for(job: &str) -> Request {
    Request::Wait {
        job: job.to_owned(),
        timeout_ms: None,
    }
}

fn status(response: &Response) -> &str {
    assert!(response.ok, "wait: {response:?}");
    response.result.as_ref().expect("a view")["status"]
        .as_str()
        .expect("a status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_waits_for_no_commit_only_when_the_job_s_writes_are_durable() {
    let data = tempfile::tempdir().expect("a temporary directory");
    let store = Arc::new(HeldStore::default());
    let genome = genome_over(&store, data.path(), NodeSettings::default());
    let (kernel, join) = Actor::spawn(None, Kernel, Arc::clone(&genome))
        .await
        .expect("the kernel starts");

    // Jobs parked on their waits, all durable (a submit is answered once it is).
    let continued = submit(&kernel, PARKED).await;
    let untouched = submit(&kernel, PARKED).await;
    assert_eq!(
        status(&call(&kernel, wait_for(&untouched)).await),
        "waiting"
    );

    // Commits are held; continuing one job puts its writes in the commit now held.
    let hold = Hold::on(&store);
    let committed_before = store.commits.load(Ordering::SeqCst);
    let continuing = tokio::spawn({
        let kernel = kernel.clone();
        let job = continued.clone();
        async move {
            call(
                &kernel,
                Request::Continue {
                    job,
                    key: "go".to_owned(),
                    input: serde_json::json!({}),
                },
            )
            .await
        }
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        while !store.blocked.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the continue's batch reaches the store and is held there");

    // The untouched job: everything of it is durable, so its wait is answered while the
    // commit is held (it used to wait for the next seal, which waits for that commit).
    let answer = tokio::time::timeout(Duration::from_secs(5), call(&kernel, wait_for(&untouched)))
        .await
        .expect("a wait for a durable settled job is answered at once");
    assert_eq!(status(&answer), "waiting");

    // The continued job: memory shows it succeeded, but that is in the held commit. Its
    // wait must not be answered before the commit is durable.
    let waiting = tokio::spawn({
        let kernel = kernel.clone();
        let store = Arc::clone(&store);
        let job = continued.clone();
        async move {
            let answer = call(&kernel, wait_for(&job)).await;
            (answer, store.commits.load(Ordering::SeqCst))
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished() && !continuing.is_finished(),
        "nothing that shows the continue may be answered while its commit is held"
    );
    drop(hold);
    let (answer, commits_seen) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered once durable")
        .expect("the waiter");
    assert_eq!(status(&answer), "succeeded");
    assert!(
        commits_seen > committed_before,
        "the answer came after the continue's commit"
    );
    let continued_answer = continuing.await.expect("the continue");
    assert!(continued_answer.ok, "continue: {continued_answer:?}");

    kernel.stop(None);
    join.await.expect("the kernel stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_removes_an_ended_job_s_artifacts_once_its_journal_is_gone_for_good() {
    let data = tempfile::tempdir().expect("a temporary directory");
    let store = Arc::new(HeldStore::default());
    let settings = NodeSettings {
        retention: palm_actors::path::retention::Retention {
            journal_ms: 0,
            summary_ms: None,
        },
        ..NodeSettings::default()
    };
    let genome = genome_over(&store, data.path(), settings);
    let (kernel, join) = Actor::spawn(None, Kernel, Arc::clone(&genome))
        .await
        .expect("the kernel starts");
    let ended = submit(&kernel, ENDS).await;
    assert_eq!(status(&call(&kernel, wait_for(&ended)).await), "succeeded");
    let parked = submit(&kernel, PARKED).await;
    // What a `verify` step of each would have kept.
    for job in [&ended, &parked] {
        let dir = palm_agents::artifacts::dir(data.path(), job);
        std::fs::create_dir_all(&dir).expect("artifacts dir");
        std::fs::write(dir.join("verify-1.log"), "ok\n").expect("a log");
    }

    // The walk's batch is held: the journal is not gone yet, so neither is the log.
    let hold = Hold::on(&store);
    kernel
        .cast(KernelMsg::Collect { cursor: None })
        .expect("the kernel takes the walk");
    tokio::time::timeout(Duration::from_secs(10), async {
        while !store.blocked.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the walk's batch reaches the store and is held there");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ended_dir = palm_agents::artifacts::dir(data.path(), &ended);
    assert!(
        ended_dir.join("verify-1.log").exists(),
        "removed before the journal's removal was durable"
    );
    drop(hold);
    tokio::time::timeout(Duration::from_secs(10), async {
        while ended_dir.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the ended job's artifacts go once its compaction is durable");
    let view = call(&kernel, Request::Status { job: ended.clone() }).await;
    assert_eq!(view.result.expect("a view")["compacted"], true);
    assert!(
        palm_agents::artifacts::dir(data.path(), &parked)
            .join("verify-1.log")
            .exists(),
        "a live job keeps its artifacts"
    );

    kernel.stop(None);
    join.await.expect("the kernel stops");
}
