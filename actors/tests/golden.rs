//! The store format, pinned. A fixed scenario (a job that ran an effect and succeeded, a
//! job parked on a wait and moved to a second revision of its flow) is run through the job path on a memory store; every table's
//! keys and values must equal `golden/<FORMAT>.txt` byte for byte, and that file, loaded
//! into a fresh store, must open and read back as the same jobs.
//!
//! A change to how anything is stored fails here. If it is deliberate, bump
//! `palm_actors::path::records::FORMAT` (with a migration or a refusal of the old format) and
//! write the new version's file with `PALM_BLESS=1 cargo test -p palm-actors --test
//! golden`; the old version's file stays, as the record of what older stores hold.

mod support;

use palm_actors::job::JobStatus;
use palm_actors::path::records::{FORMAT, FORMATS_READ};
use palm_actors::store::{MemoryStore, Store, Table, WriteBatch};
use serde_json::json;
use std::fmt::Write as _;

#[path = "../../tests/support/hex.rs"]
mod hex;
use hex::{hex, unhex};
use std::path::PathBuf;
use std::sync::Arc;
use support::Host;

fn golden_path() -> PathBuf {
    let name = FORMAT.replace('/', "-");
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{name}.txt"))
}

/// Every table, one `TABLE KEY VALUE` line (hex) per entry, in key order.
fn dump(store: &dyn Store) -> String {
    let mut out = String::new();
    for table in Table::ALL {
        store
            .scan(table, b"", None, &mut |key, value| {
                let _ = writeln!(out, "{} {} {}", table.name(), hex(key), hex(value));
                true
            })
            .expect("scan");
    }
    out
}

/// The flows of the scenario, fixed here (not the examples, which may be reworded).
const HELLO: &str = "name: hello\ninput:\n  who: { type: string, default: world }\ntree:\n  sequence:\n    - run: { cmd: \"echo hello {{ input.who }}\", save: echoed }\n    - set: { greeting: \"{{ state.echoed.stdout | trim }}\" }\n";
const APPROVAL: &str = "name: approval\ntree:\n  sequence:\n    - run: { cmd: \"echo building\", save: build }\n    - wait:\n        key: approve\n        prompt: \"Ship the build?\"\n        schema: { type: object, required: [ok], properties: { ok: { type: boolean } } }\n    - run: { cmd: \"echo shipped\" }\n";

/// The fixed scenario: returns (the succeeded job, the parked job, moved to a second
/// revision of its flow).
fn scenario(host: &mut Host) -> (String, String) {
    let hello = host.submit_source(HELLO, json!({}));
    let effect = host.claim().expect("hello's effect");
    host.complete_run(&effect, 0, "hello world\n");
    let approval = host.submit_source(APPROVAL, json!({}));
    let build = host.claim().expect("approval's build");
    host.complete_run(&build, 0, "building\n");
    let second = APPROVAL.replace("echo shipped", "echo shipped twice");
    host.path
        .add_definition(host.now, &second, "approval.yaml")
        .expect("a second revision");
    let store = Arc::clone(&host.store);
    let moved = host
        .path
        .migrate(host.now, &*store, "approval", 2, &[], false)
        .expect("migrate");
    assert_eq!(moved.moved, 1);
    host.commit();
    (hello.job, approval.job)
}

#[test]
fn the_store_format_is_what_the_golden_file_says() {
    let mut host = Host::new();
    let (hello, approval) = scenario(&mut host);
    assert_eq!(host.view(&hello).status, JobStatus::Succeeded);
    assert_eq!(host.view(&approval).status, JobStatus::Waiting);
    let written = dump(&*host.store);
    let path = golden_path();
    let golden = match std::fs::read_to_string(&path) {
        Ok(golden) => golden,
        Err(_) if std::env::var_os("PALM_BLESS").is_some() => {
            std::fs::write(&path, &written).expect("write the golden file");
            written.clone()
        }
        Err(err) => panic!(
            "no golden file for store format {FORMAT} at {} ({err}): a new format needs one \
             (PALM_BLESS=1 writes it)",
            path.display()
        ),
    };
    if written != golden {
        let first = written
            .lines()
            .zip(golden.lines())
            .find(|(w, g)| w != g)
            .map(|(w, g)| format!("\n  now:    {w}\n  golden: {g}"))
            .unwrap_or_else(|| "(one is a prefix of the other)".to_owned());
        panic!(
            "the store format changed without a version bump (FORMAT is still {FORMAT}); first difference:{first}"
        );
    }
}

/// Loads a golden file into a fresh store, opens it, and checks the scenario's two jobs
/// read back (their ids are the file's own: a store keeps its tag).
fn reads_back(file: &std::path::Path) -> Arc<MemoryStore> {
    let golden = std::fs::read_to_string(file).expect("golden file");
    let store = Arc::new(MemoryStore::durable());
    let mut batch = WriteBatch::new();
    let mut jobs = Vec::new();
    for line in golden.lines() {
        let mut parts = line.split(' ');
        let (table, key, value) = (
            parts.next().expect("table"),
            parts.next().expect("key"),
            parts.next().expect("value"),
        );
        let table = Table::ALL
            .into_iter()
            .find(|t| t.name() == table)
            .unwrap_or_else(|| panic!("unknown table {table}"));
        if table == Table::Jobs {
            jobs.push(String::from_utf8(unhex(key)).expect("a job id"));
        }
        batch.put(table, unhex(key), unhex(value));
    }
    store.commit(&batch).expect("commit");
    jobs.sort_by_key(|id| {
        id.rsplit_once('-')
            .map(|(_, n)| n.parse::<u64>().unwrap_or(0))
    });
    let [hello, approval] = jobs.as_slice() else {
        panic!("the scenario holds two jobs: {jobs:?}");
    };
    let mut host = Host::open(Arc::clone(&store), support::T0);
    assert_eq!(host.view(hello).status, JobStatus::Succeeded);
    assert_eq!(host.view(hello).state["greeting"], "hello world");
    let parked = host.view(approval);
    assert_eq!(parked.status, JobStatus::Waiting);
    assert_eq!(parked.state["build"]["stdout"], "building\n");
    store
}

#[test]
fn a_store_in_the_golden_format_opens_and_reads_back() {
    reads_back(&golden_path());
}

/// Every older format this build still reads: its golden file opens, reads back, and is
/// marked as this build's format by its first write.
#[test]
fn older_formats_still_open_and_are_upgraded_on_write() {
    for format in FORMATS_READ.iter().filter(|f| **f != FORMAT) {
        let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/golden/{}.txt", format.replace('/', "-")));
        let store = reads_back(&file);
        let mut host = Host::open(Arc::clone(&store), support::T0);
        host.commit();
        assert_eq!(
            store.get(Table::Meta, b"format").expect("read"),
            Some(FORMAT.as_bytes().to_vec()),
            "{format} is marked {FORMAT} once written"
        );
    }
}

/// The `groups` table (added within format 2: an older store simply has it empty, and
/// an older build never reads it) pinned on its own, so its record cannot drift either.
#[test]
fn a_process_group_record_is_stored_as_pinned() {
    use palm_actors::path::records::RunningGroup;
    let mut host = Host::new();
    host.path
        .record_group(
            "a2rw-1/0.0/1",
            RunningGroup {
                token: 7,
                pgid: 31_337,
                boot: "b0".to_owned(),
                start_ticks: 123_456,
            },
        )
        .expect("an effect this path does not know is recorded as is");
    host.commit();
    let mut lines = Vec::new();
    host.store
        .scan(Table::Groups, b"", None, &mut |key, value| {
            lines.push(format!("{} {}", hex(key), hex(value)));
            true
        })
        .expect("scan");
    // key: the effect key; value: postcard varints token 7, pgid 31 337, boot "b0",
    // start ticks 123 456.
    assert_eq!(
        lines,
        vec!["613272772d312f302e302f31 07e9f401026230c0c407".to_owned()]
    );
}
