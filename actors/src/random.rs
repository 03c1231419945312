//! Seeded randomness for the simulator and the property tests: a small deterministic RNG
//! and a generator of random flows from the whole node vocabulary.
//!
//! Nothing here reads a clock or the OS: the same seed gives the same numbers and the
//! same flows everywhere, which is what lets a failing simulator run be replayed from
//! its seed.

use serde_json::{Value, json};

/// A small deterministic RNG (xorshift64*): the same seed gives the same sequence on
/// every machine and every run, which is all the simulator and the property tests need.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// True with the given probability in percent.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One item of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A new generator whose sequence is independent of this one's from now on.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

struct Gen<'a> {
    rng: &'a mut Rng,
    waits: u32,
    sets: u32,
    nodes: u32,
    /// Only flows that end under fair scheduling: a reactive (`memory: false`) composite
    /// re-runs finished effect leaves on every tick, so it holds effect-free leaves only.
    terminating: bool,
    /// Needs some `run` leaves ask for (placement in a tree of nodes).
    needs: Vec<String>,
}

impl Gen<'_> {
    fn leaf(&mut self, in_for_each: bool) -> Value {
        self.nodes += 1;
        match self.rng.below(20) {
            0..=7 => {
                let cmd = if in_for_each {
                    "work {{ item }}"
                } else {
                    "work {{ state | length }}"
                };
                let mut run = json!({ "cmd": cmd });
                if !self.needs.is_empty() && self.rng.chance(40) {
                    let need = self.rng.pick(&self.needs).clone();
                    run["needs"] = json!([need]);
                }
                if self.rng.chance(30) {
                    run["save"] = json!(format!("r{}", self.nodes));
                }
                if self.rng.chance(20) {
                    run["allow_failure"] = json!(true);
                }
                json!({ "run": run })
            }
            8 | 9 => {
                self.waits += 1;
                let mut wait = json!({ "key": format!("w{}", self.waits), "prompt": "go {{ input.items | length }}?" });
                if self.rng.chance(40) {
                    wait["schema"] = json!({"type": "integer"});
                }
                if self.rng.chance(30) {
                    wait["timeout_ms"] = json!(100 + self.rng.below(400));
                }
                json!({ "wait": wait })
            }
            10..=12 => json!({ "sleep": { "ms": 10 + self.rng.below(300) } }),
            13 | 14 => {
                self.sets += 1;
                json!({ "set": { format!("s{}", self.sets): "{{ (state.count | default(0)) + 1 }}", "count": "{{ (state.count | default(0)) + 1 }}" } })
            }
            15 | 16 => json!({ "check": "(state.count | default(0)) % 2 == 0" }),
            17 => json!("succeed"),
            18 => json!({ "fail": "boom at {{ state.count | default(0) }}" }),
            _ => json!({ "sleep": 0 }),
        }
    }

    /// A leaf without effects (set, check, succeed, fail).
    fn pure_leaf(&mut self) -> Value {
        self.nodes += 1;
        match self.rng.below(4) {
            0 => {
                self.sets += 1;
                json!({ "set": { "count": "{{ (state.count | default(0)) + 1 }}" } })
            }
            1 => json!({ "check": "(state.count | default(0)) % 2 == 0" }),
            2 => json!("succeed"),
            _ => json!({ "fail": "no" }),
        }
    }

    fn node(&mut self, depth: u32, in_for_each: bool) -> Value {
        if depth >= 4
            || self.nodes > 40
            || (depth > 0 && self.rng.chance(10 + 20 * u64::from(depth)))
        {
            return self.leaf(in_for_each);
        }
        self.nodes += 1;
        let kids = |g: &mut Gen<'_>, n: u64| -> Vec<Value> {
            (0..n).map(|_| g.node(depth + 1, in_for_each)).collect()
        };
        match self.rng.below(13) {
            0..=3 if self.terminating && self.rng.chance(25) => {
                let kind = if self.rng.chance(50) {
                    "sequence"
                } else {
                    "selector"
                };
                let n = 1 + self.rng.below(3);
                let children: Vec<Value> = (0..n).map(|_| self.pure_leaf()).collect();
                json!({ kind: { "memory": false, "children": children } })
            }
            0 | 1 => {
                let n = 1 + self.rng.below(4);
                let memory = self.terminating || self.rng.chance(60);
                json!({ "sequence": { "memory": memory, "children": kids(self, n) } })
            }
            2 | 3 => {
                let n = 1 + self.rng.below(4);
                let memory = self.terminating || self.rng.chance(60);
                json!({ "selector": { "memory": memory, "children": kids(self, n) } })
            }
            4 => {
                let n = 1 + self.rng.below(3);
                let success = match self.rng.below(3) {
                    0 => json!("all"),
                    1 => json!("any"),
                    _ => json!(1),
                };
                let failure = if self.rng.chance(50) {
                    json!("any")
                } else {
                    json!("all")
                };
                json!({ "parallel": { "success": success, "failure": failure, "children": kids(self, n) } })
            }
            5 if !in_for_each => {
                let body = self.node(depth + 1, true);
                json!({ "for_each": { "items": "input.items", "max_concurrency": 1 + self.rng.below(3), "do": body } })
            }
            6 => json!({ "invert": { "do": self.node(depth + 1, in_for_each) } }),
            7 => json!({ "force_success": { "do": self.node(depth + 1, in_for_each) } }),
            8 => json!({ "force_failure": { "do": self.node(depth + 1, in_for_each) } }),
            9 => {
                let backoff = if self.rng.chance(50) { 0 } else { 20 };
                json!({ "retry": { "attempts": 1 + self.rng.below(3), "backoff_ms": backoff, "do": self.node(depth + 1, in_for_each) } })
            }
            10 => {
                json!({ "repeat": { "n": 1 + self.rng.below(3), "do": self.node(depth + 1, in_for_each) } })
            }
            11 => {
                json!({ "timeout": { "ms": 100 + self.rng.below(1000), "do": self.node(depth + 1, in_for_each) } })
            }
            _ => {
                // until_success over a run only: a child that fails without effects would
                // spin forever, which is a flow bug, not a property.
                json!({ "until_success": { "backoff_ms": 10, "do": { "run": "try {{ state.count | default(0) }}" } } })
            }
        }
    }
}

/// A random definition (JSON text) named `name`, from the whole vocabulary; some may
/// loop forever by design (a reactive composite over effects).
pub fn random_flow(rng: &mut Rng, name: &str) -> String {
    generate(rng, name, false, &[])
}

/// A random definition that ends under fair scheduling (what the simulator submits, so
/// that liveness is a property of Palm and not of the flow).
pub fn terminating_flow(rng: &mut Rng, name: &str) -> String {
    generate(rng, name, true, &[])
}

/// A terminating flow some of whose `run` leaves need one of `needs`.
pub fn terminating_flow_with_needs(rng: &mut Rng, name: &str, needs: &[&str]) -> String {
    generate(rng, name, true, needs)
}

fn generate(rng: &mut Rng, name: &str, terminating: bool, needs: &[&str]) -> String {
    let mut g = Gen {
        rng,
        waits: 0,
        sets: 0,
        nodes: 0,
        terminating,
        needs: needs.iter().map(|n| (*n).to_owned()).collect(),
    };
    // The root is always a composite with several children, so most runs go deep.
    let count = 2 + g.rng.below(4);
    let children: Vec<Value> = (0..count).map(|_| g.node(1, false)).collect();
    let memory = g.terminating || g.rng.chance(70);
    let tree = match g.rng.below(4) {
        0 | 1 => json!({ "sequence": { "memory": memory, "children": children } }),
        2 => json!({ "selector": { "memory": memory, "children": children } }),
        _ => json!({ "parallel": { "success": "all", "children": children } }),
    };
    let flow = json!({
        "name": name,
        "input": { "items": { "type": "array", "default": [1, 2, 3] } },
        "tree": tree,
    });
    serde_json::to_string_pretty(&flow).expect("json")
}
