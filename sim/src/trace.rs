//! The run's trace: one compact line per event, with virtual time and node, and a hash
//! of every line (printed or not), so two runs of one seed can be compared bit for bit.

/// See the module docs.
#[derive(Debug)]
pub struct Trace {
    print: bool,
    hash: u64,
    lines: u64,
    /// The last lines, kept for a failure report.
    tail: std::collections::VecDeque<String>,
}

/// Lines kept for a failure report.
const TAIL_LINES_MAX: usize = 40;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Trace {
    /// A trace that prints each line to stdout when `print`.
    pub fn new(print: bool) -> Trace {
        Trace {
            print,
            hash: FNV_OFFSET,
            lines: 0,
            tail: std::collections::VecDeque::new(),
        }
    }

    /// Records one event.
    pub fn line(&mut self, now_ms: u64, node: usize, text: &str) {
        let line = format!("{:>5}.{:03} n{node} {text}", now_ms / 1000, now_ms % 1000);
        for byte in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(byte);
            self.hash = self.hash.wrapping_mul(FNV_PRIME);
        }
        self.lines += 1;
        if self.print {
            use std::io::Write;
            // A closed stdout (`| head`) ends the printing, not the run.
            if writeln!(std::io::stdout().lock(), "{line}").is_err() {
                self.print = false;
            }
        }
        if self.tail.len() == TAIL_LINES_MAX {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    /// FNV-1a over every line so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Lines so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The last lines (for a failure report).
    pub fn tail(&self) -> Vec<String> {
        self.tail.iter().cloned().collect()
    }
}
