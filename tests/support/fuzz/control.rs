//! Fuzz body: the control protocol. The input is split into lines; each is parsed as a
//! `Request` exactly as the control socket does, and answered by an offline desk over a
//! memory store (writes committed after each). Bad lines are refused with a parse error;
//! good ones give a response — never a panic — and the store always reopens.
//! Shared by `fuzz/fuzz_targets/control_request.rs` and `shell/tests/fuzz_props.rs`.

use palm_actors::path::{JobPath, JobPathConfig};
use palm_actors::store::{MemoryStore, Store};
use palm_api::protocol::Request;
use palm_node::genome::NodeInfo;
use palm_node::genome::desk::{Answer, Desk};
use std::sync::Arc;

pub fn run(data: &[u8]) {
    let store = Arc::new(MemoryStore::new());
    let config = JobPathConfig::default();
    let (path, _) = JobPath::open(&*store, config.clone(), 1).expect("a fresh memory store opens");
    let mut desk = Desk {
        path,
        store: Arc::clone(&store) as Arc<dyn Store>,
        info: NodeInfo {
            name: "fuzz".into(),
            profile: "all-in-one".into(),
            data: std::path::PathBuf::from("/nonexistent/palm-fuzz"),
            pid: 1,
            started_at: 0,
            embedded: true,
        },
        places: None,
    };
    for line in data.split(|b| *b == b'\n').take(64) {
        let Ok(request) = serde_json::from_slice::<Request>(line) else {
            continue;
        };
        let response = match desk.answer(request, true) {
            Answer::AfterCommit(response) => response,
            Answer::Read(request) => desk.read(request, None),
            Answer::Watch(job) => desk.view(&job),
        };
        let _ = serde_json::to_vec(&response).expect("a response serialises");
        let batch = desk.path.take_batch();
        let _ = desk.path.take_notices();
        store.commit(&batch).expect("a memory store commits");
    }
    JobPath::open(&*store, config, 1).expect("what the desk wrote reopens");
}
