//! Benchmarks of the job path, each against a baseline measured in the same run.
//!
//! - `engine/tick_100_nodes`: ticks/s of the pure engine on a 100-node tree that visits
//!   every leaf on every tick (a sequence of 9 sequences of 10 `succeed` leaves). The
//!   design's reference is py_trees at ~2.4k ticks/s on such a tree; the goal is ≥ 100×.
//! - `durable/*`: one-`set`-leaf jobs submitted through `JobPath` and committed to redb
//!   in batches of 100 jobs (each job: submitted → succeeded in one step), versus the
//!   same batches committed to redb directly (`durable/raw_redb_same_batches`: a second
//!   job path over a scratch memory store writes them outside the measured time; same
//!   tables, keys, values and order). The ratio of the two is the job path's overhead.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use palm_actors::bt::{Engine, Program};
use palm_actors::definition;
use palm_actors::path::{FlowRef, JobPath, JobPathConfig, SubmitRequest};
use palm_actors::store::{MemoryStore, RedbStore, Store};
use std::hint::black_box;
use std::sync::Arc;

const JOBS_PER_COMMIT: usize = 100;

fn hundred_node_tree() -> String {
    let mut yaml = String::from("name: wide\ntree:\n  sequence:\n");
    for _ in 0..9 {
        yaml.push_str("    - sequence: [succeed, succeed, succeed, succeed, succeed, succeed, succeed, succeed, succeed, succeed]\n");
    }
    yaml
}

fn engine(c: &mut Criterion) {
    let definition = definition::parse(&hundred_node_tree(), "wide.yaml").expect("parse");
    let program = Arc::new(Program::compile(&definition, &|_| None).expect("compile"));
    assert_eq!(program.len(), 100, "the benchmark tree has 100 nodes");
    let mut engine = Engine::new(program, "bench", serde_json::json!({}));
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tick_100_nodes", |b| {
        let mut now = 0;
        b.iter(|| {
            now += 1;
            black_box(engine.tick_once(now))
        })
    });
    group.finish();
}

fn durable(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs_store = Arc::new(RedbStore::open(&dir.path().join("jobs.redb")).expect("open"));
    let (mut path, _) = JobPath::open(&*jobs_store, JobPathConfig::default(), 1).expect("job path");
    path.add_definition(0, "name: one\ntree:\n  set: { done: true }\n", "one.yaml")
        .expect("definition");
    jobs_store.commit(&path.take_batch()).expect("commit");

    // The raw baseline commits the very batches the job path writes: a second path over
    // a scratch memory store produces them outside the measured time, so the raw store
    // sees the same tables, keys (fresh in its file) and values, in the same order.
    let scratch = MemoryStore::new();
    let (mut producer, _) = JobPath::open(&scratch, JobPathConfig::default(), 1).expect("job path");
    producer
        .add_definition(0, "name: one\ntree:\n  set: { done: true }\n", "one.yaml")
        .expect("definition");
    scratch.commit(&producer.take_batch()).expect("commit");
    let mut next_batch = move || {
        for _ in 0..JOBS_PER_COMMIT {
            submit(&mut producer, &scratch);
        }
        producer.take_notices();
        let batch = producer.take_batch();
        scratch.commit(&batch).expect("commit");
        batch
    };
    let shape = next_batch();
    let (writes, bytes) = (shape.len(), shape.bytes());

    let mut group = c.benchmark_group("durable");
    group.throughput(Throughput::Elements(JOBS_PER_COMMIT as u64));
    group.sample_size(30);
    group.bench_function("jobs_100_per_commit", |b| {
        b.iter(|| {
            for _ in 0..JOBS_PER_COMMIT {
                submit(&mut path, &*jobs_store);
            }
            let batch = path.take_batch();
            path.take_notices();
            jobs_store.commit(&batch).expect("commit");
        })
    });
    let raw = RedbStore::open(&dir.path().join("raw.redb")).expect("open");
    group.bench_function("raw_redb_same_batches", |b| {
        b.iter_batched(
            &mut next_batch,
            |batch| raw.commit(&batch).expect("commit"),
            BatchSize::SmallInput,
        )
    });
    group.finish();
    eprintln!("durable: one batch of {JOBS_PER_COMMIT} jobs = {writes} writes, {bytes} bytes");
}

fn submit(path: &mut JobPath, store: &dyn Store) {
    path.submit(
        0,
        SubmitRequest {
            flow: FlowRef::Stored {
                name: "one".into(),
                revision: None,
            },
            input: Default::default(),
            args: Vec::new(),
            started_by: None,
        },
        store,
    )
    .expect("submit");
}

criterion_group!(benches, engine, durable);
criterion_main!(benches);
