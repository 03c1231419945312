//! Unit tests of the place book: lifecycle, restarts and give-up, probes and thresholds,
//! adoption, job-owned places, readiness and the node journal.

use super::*;
use crate::store::MemoryStore;

const T0: u64 = 1_000_000;

fn spawned(name: &str, when: RestartWhen, restarts_max: u32) -> PlaceSpec {
    let source = Source::Spawn(SpawnSpec {
        cmd: "server".into(),
        args: vec![],
        env: vec![],
        cwd: None,
        restart: RestartPolicy {
            when,
            backoff_ms: 100,
            backoff_max_ms: 1_000,
            restarts_max,
            window_ms: 60_000,
        },
        stop_signal: StopSignal::Term,
        stop_grace_ms: 500,
    });
    let mut probe = Probe::of(Check::Http("http://127.0.0.1:1/".into()));
    probe.failures = 2;
    PlaceSpec {
        name: name.into(),
        source,
        probe,
        capabilities: vec!["web".into()],
        owner: Owner::Node,
    }
}

fn adopted(name: &str, adopt: Adopt) -> PlaceSpec {
    let source = Source::Adopt(adopt);
    PlaceSpec {
        name: name.into(),
        probe: Probe::default_for(&source),
        source,
        capabilities: vec![],
        owner: Owner::Node,
    }
}

fn book() -> (PlaceBook, MemoryStore) {
    let store = MemoryStore::new();
    let (book, specs, _) = PlaceBook::open(&store, vec!["cpu".into()]).expect("open");
    assert!(specs.is_empty());
    (book, store)
}

/// The incarnation of the single `Spawn` command among `commands`.
fn spawn_of(commands: &[PlaceCommand]) -> u64 {
    commands
        .iter()
        .find_map(|c| match c {
            PlaceCommand::Spawn { incarnation, .. } => Some(*incarnation),
            _ => None,
        })
        .expect("a spawn command")
}

fn probe_of(commands: &[PlaceCommand]) -> u64 {
    commands
        .iter()
        .find_map(|c| match c {
            PlaceCommand::Probe { incarnation, .. } => Some(*incarnation),
            _ => None,
        })
        .expect("a probe command")
}

fn ready_web(book: &mut PlaceBook) -> u64 {
    book.add(
        T0,
        spawned("web", RestartWhen::OnFailure, 2),
        Origin::Config,
        false,
    )
    .expect("add");
    let inc = spawn_of(&book.take_commands());
    book.handle_spawned(T0, "web", inc, 100);
    book.tick(T0 + 100);
    assert_eq!(probe_of(&book.take_commands()), inc);
    book.handle_probe(T0 + 110, "web", inc, true, "http 200");
    assert_eq!(book.state("web"), Some(PlaceState::Ready));
    inc
}

#[test]
fn a_spawned_place_becomes_ready_on_its_probe_and_gates_its_needs() {
    let (mut book, _) = book();
    let before = book.readiness(T0);
    assert!(!before.all_ready("j-1", &["web".into()]));
    assert!(
        before.all_ready("j-1", &["cpu".into()]),
        "node capabilities are ready"
    );
    let blocked = before.blocked("j-1", &["web".into()], T0);
    assert_eq!(
        blocked[0].reason,
        "no place or capability `web` on this node"
    );
    ready_web(&mut book);
    let readiness = book.readiness(T0);
    assert!(readiness.all_ready("j-1", &["web".into()]));
    assert!(readiness.all_ready("j-1", &["web".into(), "cpu".into()]));
}

#[test]
fn probe_failures_past_the_threshold_make_it_unready_and_successes_ready_again() {
    let (mut book, _) = book();
    let inc = ready_web(&mut book);
    book.handle_probe(T0 + 1_000, "web", inc, false, "tcp connect refused");
    assert_eq!(
        book.state("web"),
        Some(PlaceState::Ready),
        "one failure is tolerated"
    );
    book.handle_probe(T0 + 2_000, "web", inc, false, "tcp connect refused");
    assert_eq!(book.state("web"), Some(PlaceState::Unready));
    let blocked = book.readiness(T0 + 2_000).blocked("j", &["web".into()], 0);
    assert_eq!(blocked[0].since, T0 + 2_000);
    assert!(
        blocked[0].reason.contains("tcp connect refused"),
        "{blocked:?}"
    );
    book.handle_probe(T0 + 3_000, "web", inc, true, "http 200");
    assert_eq!(book.state("web"), Some(PlaceState::Ready));
}

#[test]
fn a_crash_restarts_with_backoff_then_gives_up_past_the_budget() {
    let (mut book, _) = book();
    let mut inc = ready_web(&mut book);
    let mut now = T0 + 1_000;
    for (attempt, delay) in [(1, 100), (2, 200)] {
        book.handle_exited(
            now,
            "web",
            inc,
            Exit {
                code: None,
                signal: Some(9),
                detail: None,
            },
        );
        assert_eq!(book.state("web"), Some(PlaceState::Unready));
        assert_eq!(book.next_deadline(), Some(now + delay), "attempt {attempt}");
        book.tick(now + delay - 1);
        assert!(book.take_commands().is_empty(), "not before the backoff");
        now += delay;
        book.tick(now);
        inc = spawn_of(&book.take_commands());
        assert_eq!(book.state("web"), Some(PlaceState::Starting));
        book.handle_spawned(now, "web", inc, 200 + attempt);
    }
    book.handle_exited(
        now,
        "web",
        inc,
        Exit {
            code: Some(1),
            signal: None,
            detail: None,
        },
    );
    assert_eq!(book.state("web"), Some(PlaceState::Failed));
    let view = &book.views()[0];
    assert!(
        view.reason
            .starts_with("gave up after 2 restarts within 60s"),
        "{}",
        view.reason
    );
    assert_eq!(view.restarts, 2);
    assert_eq!(book.next_deadline(), None);
}

#[test]
fn stale_answers_from_an_earlier_life_are_ignored() {
    let (mut book, _) = book();
    let old = ready_web(&mut book);
    book.handle_exited(
        T0 + 1,
        "web",
        old,
        Exit {
            code: Some(1),
            signal: None,
            detail: None,
        },
    );
    book.tick(T0 + 1_000);
    let new = spawn_of(&book.take_commands());
    assert_ne!(old, new);
    book.handle_probe(T0 + 1_001, "web", old, true, "late");
    assert_eq!(book.state("web"), Some(PlaceState::Starting));
    book.handle_exited(T0 + 1_002, "web", old, Exit::default());
    assert_eq!(book.state("web"), Some(PlaceState::Starting));
}

#[test]
fn a_command_that_does_not_exist_fails_at_once() {
    let (mut book, _) = book();
    book.add(
        T0,
        spawned("web", RestartWhen::Always, 5),
        Origin::Config,
        false,
    )
    .expect("add");
    let inc = spawn_of(&book.take_commands());
    book.handle_spawned(T0, "web", inc, 7);
    book.handle_exited(
        T0 + 5,
        "web",
        inc,
        Exit {
            code: Some(127),
            signal: None,
            detail: Some("sh: 1: nope: not found".into()),
        },
    );
    assert_eq!(book.state("web"), Some(PlaceState::Failed));
    assert_eq!(
        book.views()[0].reason,
        "cannot start: exited with code 127: sh: 1: nope: not found"
    );
    book.add(
        T0,
        spawned("other", RestartWhen::Always, 5),
        Origin::Config,
        false,
    )
    .expect("add");
    let inc = spawn_of(&book.take_commands());
    book.handle_spawn_failed(T0, "other", inc, "No such file or directory (os error 2)");
    assert_eq!(book.state("other"), Some(PlaceState::Failed));
}

#[test]
fn remove_stops_a_spawned_place_and_forgets_it_after_exit() {
    let (mut book, store) = book();
    book.add(
        T0,
        spawned("web", RestartWhen::OnFailure, 2),
        Origin::Runtime,
        true,
    )
    .expect("add");
    let inc = spawn_of(&book.take_commands());
    store.commit(&book.take_batch()).expect("commit");
    let (_, restored, _) = PlaceBook::open(&store, vec![]).expect("reopen");
    assert_eq!(restored.len(), 1, "runtime places are stored");
    book.handle_spawned(T0, "web", inc, 100);
    book.remove(T0 + 10, "web").expect("remove");
    assert_eq!(book.state("web"), Some(PlaceState::Stopping));
    let commands = book.take_commands();
    assert!(
        matches!(
            &commands[..],
            [PlaceCommand::Stop {
                pid: 100,
                signal: StopSignal::Term,
                grace_ms: 500,
                ..
            }]
        ),
        "{commands:?}"
    );
    book.handle_exited(
        T0 + 20,
        "web",
        inc,
        Exit {
            code: None,
            signal: Some(15),
            detail: None,
        },
    );
    assert_eq!(book.state("web"), None);
    store.commit(&book.take_batch()).expect("commit");
    let (_, restored, _) = PlaceBook::open(&store, vec![]).expect("reopen");
    assert!(restored.is_empty(), "removal is stored");
    assert_eq!(
        book.remove(T0, "web"),
        Err(PlaceError::Unknown("web".into()))
    );
}

#[test]
fn config_places_cannot_be_removed_at_run_time() {
    let (mut book, _) = book();
    ready_web(&mut book);
    assert_eq!(
        book.remove(T0, "web"),
        Err(PlaceError::FromConfig("web".into()))
    );
    assert_eq!(
        book.add(
            T0,
            spawned("web", RestartWhen::Never, 1),
            Origin::Runtime,
            true
        ),
        Err(PlaceError::Exists("web".into()))
    );
}

#[test]
fn adoption_never_stops_what_it_did_not_start() {
    let (mut book, _) = book();
    book.add(
        T0,
        adopted("db", Adopt::Tcp("127.0.0.1:5432".into())),
        Origin::Config,
        false,
    )
    .expect("add");
    book.tick(T0);
    let inc = probe_of(&book.take_commands());
    book.handle_probe(T0 + 1, "db", inc, true, "tcp connect ok");
    assert_eq!(book.state("db"), Some(PlaceState::Ready));
    assert_eq!(book.stop_all(T0 + 2), 0, "nothing to wait for");
    assert!(
        book.take_commands().is_empty(),
        "no signal to an adopted place"
    );
    assert_eq!(book.state("db"), Some(PlaceState::Stopped));
    assert!(book.views()[0].reason.contains("adopted; left running"));
}

#[test]
fn an_adopted_process_that_dies_fails_without_restart() {
    let (mut book, _) = book();
    book.add(
        T0,
        adopted("agent", Adopt::Pid(4242)),
        Origin::Runtime,
        true,
    )
    .expect("add");
    book.tick(T0);
    let commands = book.take_commands();
    assert!(matches!(
        &commands[..],
        [PlaceCommand::Probe {
            pid: Some(4242),
            check: Check::Process,
            ..
        }]
    ));
    let inc = probe_of(&commands);
    book.handle_probe(T0 + 1, "agent", inc, true, "process 4242 alive");
    book.handle_probe(T0 + 2, "agent", inc, false, "process 4242 is gone");
    assert_eq!(book.state("agent"), Some(PlaceState::Failed));
}

#[test]
fn job_places_are_scoped_to_their_job_and_go_with_it() {
    let (mut book, _) = book();
    let mut spec = spawned("db", RestartWhen::OnFailure, 2);
    spec.capabilities = vec!["pg".into()];
    book.job_started(T0, "j-1", std::slice::from_ref(&spec));
    let inc = spawn_of(&book.take_commands());
    assert_eq!(book.state("j-1/db"), Some(PlaceState::Starting));
    book.handle_spawned(T0, "j-1/db", inc, 300);
    book.tick(T0 + 100);
    book.take_commands();
    book.handle_probe(T0 + 100, "j-1/db", inc, true, "ok");
    let readiness = book.readiness(T0);
    assert!(readiness.all_ready("j-1", &["db".into(), "pg".into()]));
    assert!(
        !readiness.all_ready("j-2", &["db".into()]),
        "not another job's"
    );
    assert_eq!(
        book.remove(T0, "j-1/db"),
        Err(PlaceError::OwnedByJob("j-1/db".into(), "j-1".into()))
    );
    book.job_ended(T0 + 200, "j-1");
    assert_eq!(book.state("j-1/db"), Some(PlaceState::Stopping));
    book.handle_exited(T0 + 210, "j-1/db", inc, Exit::default());
    assert_eq!(book.state("j-1/db"), None);
}

#[test]
fn restart_of_a_running_place_stops_then_starts_it() {
    let (mut book, _) = book();
    let inc = ready_web(&mut book);
    book.restart(T0 + 1, "web").expect("restart");
    assert!(matches!(
        &book.take_commands()[..],
        [PlaceCommand::Stop { .. }]
    ));
    book.handle_exited(
        T0 + 2,
        "web",
        inc,
        Exit {
            code: None,
            signal: Some(15),
            detail: None,
        },
    );
    let next = spawn_of(&book.take_commands());
    assert_ne!(next, inc);
    assert_eq!(book.state("web"), Some(PlaceState::Starting));
}

#[test]
fn every_transition_is_a_node_journal_event() {
    let (mut book, store) = book();
    let inc = ready_web(&mut book);
    book.handle_exited(
        T0 + 5,
        "web",
        inc,
        Exit {
            code: Some(1),
            signal: None,
            detail: None,
        },
    );
    store.commit(&book.take_batch()).expect("commit");
    let events = read_node_events(&store, 100).expect("events");
    let states: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            NodeEventKind::PlaceChanged { to, .. } => Some(to.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        states,
        ["pending", "starting", "starting", "ready", "unready"]
    );
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let (mut reopened, _, _) = PlaceBook::open(&store, vec![]).expect("reopen");
    reopened
        .add(T0, adopted("x", Adopt::Pid(1)), Origin::Config, false)
        .expect("add");
    store.commit(&reopened.take_batch()).expect("commit");
    let events = read_node_events(&store, 2).expect("events");
    assert_eq!(events[0].seq, 6, "the journal continues after a reopen");
}
