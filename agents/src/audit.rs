//! The audit after every run: what the agent did (the tool uses its transcript reports,
//! the files its worktree's diff shows) against the authority it was given. Pure: the
//! node's `agent` provider feeds it and ends a run that broke a rule as `violation`.
//!
//! A tool use is first classed: it reads, writes files, runs a command, calls an MCP
//! server, or is something else (a tool this audit does not know). The names are
//! Claude's tool names and Codex's item types; a declared CLI reports its own in its
//! usage file with either vocabulary. Then the rules, in this order (a tool use breaks
//! at most one):
//!
//! | rule | what breaks it |
//! |---|---|
//! | `observe_changed_files` | an observe run whose worktree changed (one per file) |
//! | `observe_write` | an observe run that used a writing tool (`Edit`, `MultiEdit`, `Write`, `NotebookEdit`, `file_change`) or ran a command that may write |
//! | `command_in_edit` | an edit run that ran a command (`Bash`, `command_execution`); for codex and CLIs, one that does more than read |
//! | `outside_allowlist` | an observe or edit run that used a tool outside its mode's allowlist: MCP tools (`mcp__*`, `mcp_tool_call`) and unknown tools always; a command in an observe run of Claude (Bash is not an observe tool there) |
//!
//! The allowlists:
//! - observe: [`READ_TOOLS`]; for Codex and declared CLIs also commands that only read
//!   ([`read_only_command`]), Codex having no other way to read a file.
//! - edit: observe's tools (commands excepted) and [`WRITE_TOOLS`].
//! - execute: anything.
//!
//! Tool uses the provider's own authority refused (`denied`) never ran and are passed
//! over. A run past its bounds keeps only its notable tool uses ([`notable`]); those
//! dropped are counted (`unaudited`): they are tools that read or write files, and the
//! diff shows what was written.

use crate::end::{RunSummary, ToolUse};
use crate::spec::Mode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Tools that only read (or plan, or search the web), allowed in every mode: Claude's
/// `Read`, `Grep`, `Glob`, `LS`, `NotebookRead`, `WebFetch`, `WebSearch`, `TodoWrite` and
/// `TodoRead` (its to-do list, not a file), `Task` and `Agent` (sub-agents, whose own tool
/// uses are in the same stream and audited too), `ExitPlanMode`, its server tools
/// `web_search` and `web_fetch`; Codex's `web_search`.
pub const READ_TOOLS: [&str; 14] = [
    "Read",
    "Grep",
    "Glob",
    "LS",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "TodoRead",
    "Task",
    "Agent",
    "ExitPlanMode",
    "web_search",
    "web_fetch",
];

/// Tools that change files, allowed from edit up: Claude's `Edit`, `MultiEdit`, `Write`,
/// `NotebookEdit`; Codex's `file_change` (and `apply_patch`, its tool's name).
pub const WRITE_TOOLS: [&str; 6] = [
    "Edit",
    "MultiEdit",
    "Write",
    "NotebookEdit",
    "file_change",
    "apply_patch",
];

/// Tools that run a command, allowed in execute only: Claude's `Bash`, Codex's
/// `command_execution` (`shell`, `exec_command`, `local_shell_call` in its rollouts).
pub const COMMAND_TOOLS: [&str; 5] = [
    "Bash",
    "command_execution",
    "shell",
    "exec_command",
    "local_shell_call",
];

/// Whose transcript it is: the rules differ only in what an observe run may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Claude Code: its observe mode has no shell at all.
    Claude,
    /// Codex: it reads files through commands, so an observe run may run those that
    /// only read (its sandbox is read-only besides).
    Codex,
    /// A CLI declared in palm.yaml, reporting its tool uses in its usage file: as Codex.
    Declared,
}

impl Kind {
    /// The kind of a provider: `declared` when palm.yaml names it.
    pub fn of(provider: &str, declared: bool) -> Kind {
        match provider {
            _ if declared => Kind::Declared,
            "claude" => Kind::Claude,
            _ => Kind::Codex,
        }
    }
}

/// The rule a violation broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// An observe run changed files.
    ObserveChangedFiles,
    /// An observe run used a writing tool, or ran a command that may write.
    ObserveWrite,
    /// An edit run ran a command.
    CommandInEdit,
    /// A tool outside the mode's allowlist.
    OutsideAllowlist,
    /// More commands or tools than the audit keeps: what it dropped went unjudged.
    Unaudited,
}

impl Rule {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::ObserveChangedFiles => "observe_changed_files",
            Rule::ObserveWrite => "observe_write",
            Rule::CommandInEdit => "command_in_edit",
            Rule::OutsideAllowlist => "outside_allowlist",
            Rule::Unaudited => "unaudited",
        }
    }
}

/// One broken rule and its evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Which rule.
    pub rule: Rule,
    /// The tool used (`None` for a changed file).
    pub tool: Option<String>,
    /// The command, the file, the arguments.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.tool, self.detail.is_empty()) {
            (Some(tool), true) => write!(f, "{} ({})", tool, self.rule.as_str()),
            (Some(tool), false) => {
                write!(f, "{} `{}` ({})", tool, self.detail, self.rule.as_str())
            }
            (None, _) => write!(f, "changed {} ({})", self.detail, self.rule.as_str()),
        }
    }
}

/// What a tool use is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Read,
    Write,
    /// A command; `writes`: it is not known to only read.
    Command {
        writes: bool,
    },
    Mcp,
    Unknown,
}

fn class(tool: &ToolUse) -> Class {
    let name = tool.name.as_str();
    if READ_TOOLS.contains(&name) {
        Class::Read
    } else if WRITE_TOOLS.contains(&name) {
        Class::Write
    } else if COMMAND_TOOLS.contains(&name) {
        Class::Command {
            writes: !read_only_command(&tool.detail),
        }
    } else if is_palm_team(tool) {
        // Palm's own board tool: a team member reading the board, posting, claiming.
        Class::Read
    } else if name.starts_with("mcp__") || name == "mcp_tool_call" {
        Class::Mcp
    } else {
        Class::Unknown
    }
}

/// Palm's `palm_team` MCP tool, as claude (`mcp__SERVER__palm_team`) or codex
/// (`mcp_tool_call` of `SERVER/palm_team`) names it.
fn is_palm_team(tool: &ToolUse) -> bool {
    (tool.name.starts_with("mcp__") && tool.name.ends_with("__palm_team"))
        || (tool.name == "mcp_tool_call" && tool.detail.ends_with("/palm_team"))
}

/// A tool use worth keeping past a summary's first bound: anything that neither only
/// reads nor only writes files (a command, an MCP call, an unknown tool).
pub fn notable(tool: &ToolUse) -> bool {
    !matches!(class(tool), Class::Read | Class::Write)
}

/// Checks a run: its mode, whose transcript, the tool uses it reported and the files
/// its worktree's diff shows (before to after the run). Empty: it stayed within its
/// authority.
pub fn audit(
    mode: Mode,
    kind: Kind,
    tools: &[ToolUse],
    files_changed: &[String],
) -> Vec<Violation> {
    let mut found = Vec::new();
    if mode == Mode::Execute {
        return found;
    }
    if mode == Mode::Observe {
        found.extend(files_changed.iter().map(|file| Violation {
            rule: Rule::ObserveChangedFiles,
            tool: None,
            detail: file.clone(),
        }));
    }
    for tool in tools.iter().filter(|t| !t.denied) {
        let rule = match (mode, class(tool)) {
            (_, Class::Read) => None,
            (Mode::Observe, Class::Write) => Some(Rule::ObserveWrite),
            (Mode::Observe, Class::Command { writes: true }) => Some(Rule::ObserveWrite),
            (Mode::Observe, Class::Command { writes: false }) => {
                (kind == Kind::Claude).then_some(Rule::OutsideAllowlist)
            }
            (Mode::Edit, Class::Write) => None,
            // Codex and CLIs read files through the shell: a command that only reads is
            // reading, in edit as in observe. Claude has Read/Grep for that.
            (Mode::Edit, Class::Command { writes: false }) if kind != Kind::Claude => None,
            (Mode::Edit, Class::Command { .. }) => Some(Rule::CommandInEdit),
            (_, Class::Mcp | Class::Unknown) => Some(Rule::OutsideAllowlist),
            (Mode::Execute, _) => None,
        };
        if let Some(rule) = rule {
            found.push(Violation {
                rule,
                tool: Some(tool.name.clone()),
                detail: tool.detail.clone(),
            });
        }
    }
    found
}

/// The most violations a saved audit lists (the rest are counted).
pub const VIOLATIONS_KEPT_MAX: usize = 100;

/// The evidence a run's result keeps (`result.audit`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Audit {
    /// The rules it broke, with the tool and its detail (the first
    /// [`VIOLATIONS_KEPT_MAX`]).
    pub violations: Vec<Violation>,
    /// Violations past those listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub violations_more: u64,
    /// Tool uses reported.
    pub tools: u64,
    /// Tool uses reported but not kept, so not audited (read or write tools past the
    /// summary's bound).
    #[serde(skip_serializing_if = "is_zero")]
    pub unaudited: u64,
    /// How many times each tool kept was used.
    pub by_name: BTreeMap<String, u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Audit {
    /// The evidence of a run: its summary's tool uses and the violations found.
    pub fn of(summary: &RunSummary, mut violations: Vec<Violation>) -> Audit {
        let more = violations.len().saturating_sub(VIOLATIONS_KEPT_MAX) as u64;
        violations.truncate(VIOLATIONS_KEPT_MAX);
        let mut by_name = BTreeMap::new();
        for tool in &summary.tools {
            *by_name.entry(tool.name.clone()).or_insert(0) += 1;
        }
        Audit {
            violations,
            violations_more: more,
            tools: summary.tools.len() as u64 + summary.tools_dropped,
            unaudited: summary.tools_dropped,
            by_name,
        }
    }
}

/// Programs that only read, whatever their arguments (output redirection aside).
const READ_ONLY_PROGRAMS: [&str; 38] = [
    "ls", "cat", "head", "tail", "wc", "nl", "grep", "egrep", "fgrep", "rg", "ag", "ack", "pwd",
    "echo", "printf", "true", "false", "cd", "stat", "tree", "du", "df", "which", "whoami",
    "uname", "date", "basename", "dirname", "realpath", "readlink", "diff", "cmp", "cut", "tr",
    "column", "jq", "test", "[",
];

/// `git` subcommands that only read.
const GIT_READ_ONLY: [&str; 15] = [
    "status",
    "diff",
    "log",
    "show",
    "blame",
    "grep",
    "ls-files",
    "ls-tree",
    "rev-parse",
    "describe",
    "shortlog",
    "cat-file",
    "rev-list",
    "merge-base",
    "show-ref",
];

/// Shells whose `-c SCRIPT` is looked into (Codex runs `bash -lc '...'`).
const SHELLS: [&str; 5] = ["bash", "sh", "zsh", "dash", "ksh"];

/// Whether a command only reads: every part of it (split on `|`, `;`, `&&`, `||`, `&`
/// and newlines; through `bash -lc '...'`) is a program of [`READ_ONLY_PROGRAMS`], a
/// read-only `git` subcommand, `sed` without `-i`, `find` without `-delete`/`-exec`,
/// `sort` and `tree` without `-o`, and nothing is redirected into a file (`/dev/null` and other
/// descriptors aside) or substituted (`$(...)`, backquotes). Anything else may write: a
/// heuristic that errs on the side of a violation.
pub fn read_only_command(command: &str) -> bool {
    read_only_script(command, 0)
}

fn read_only_script(script: &str, depth: u32) -> bool {
    if depth > 3 || script.contains("$(") || script.contains('`') || script.contains("<(") {
        return false;
    }
    let Some(segments) = segments(script) else {
        return false;
    };
    !segments.is_empty() && segments.iter().all(|words| read_only_segment(words, depth))
}

/// A script's simple commands, each as its words (quotes removed); `None` when it
/// redirects output into a file or its quotes do not close.
fn segments(script: &str) -> Option<Vec<Vec<String>>> {
    let mut all = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(q) => word.push(q),
                        None => return None,
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(q) => word.push(q),
                        None => return None,
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '>' => {
                // `2>&1`, `>&2`: between descriptors. `> /dev/null`: nowhere. Else a file.
                if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut word, &mut in_word, &mut words);
                if chars.peek() == Some(&'>') {
                    chars.next();
                }
                if chars.peek() == Some(&'&') {
                    chars.next();
                    let mut target = String::new();
                    while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                        target.push(d);
                        chars.next();
                    }
                    if target.is_empty() && chars.peek() != Some(&'-') {
                        return None;
                    }
                    continue;
                }
                while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                    chars.next();
                }
                let mut target = String::new();
                while let Some(t) = chars
                    .peek()
                    .copied()
                    .filter(|t| !t.is_whitespace() && !";|&".contains(*t))
                {
                    target.push(t);
                    chars.next();
                }
                if target != "/dev/null" {
                    return None;
                }
            }
            ';' | '|' | '&' | '\n' | '(' | ')' | '{' | '}' => {
                end_word(&mut word, &mut in_word, &mut words);
                if !words.is_empty() {
                    all.push(std::mem::take(&mut words));
                }
            }
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut words),
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut words);
    if !words.is_empty() {
        all.push(words);
    }
    Some(all)
}

/// Options by which a reading program runs another program or writes a file (`rg
/// --pre`, `git diff --ext-diff`, `sort --compress-program`...).
const RUNS_OR_WRITES: [&str; 8] = [
    "--pre",
    "--ext-diff",
    "--open-files-in-pager",
    "-O",
    "--compress-program",
    "--output",
    "--textconv",
    "--exec",
];

fn read_only_segment(words: &[String], depth: u32) -> bool {
    // A leading `NAME=value` sets the command's environment, which can make a reading
    // program run another (`GIT_EXTERNAL_DIFF`, `LESSOPEN`, `PAGER`): not read-only.
    if words.first().is_some_and(|w| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    }) {
        return false;
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    if words.iter().skip(1).any(|w| {
        RUNS_OR_WRITES
            .iter()
            .any(|o| *w == *o || w.starts_with(&format!("{o}=")))
    }) {
        return false;
    }
    let Some(first) = words.first() else {
        return true;
    };
    let program = first.rsplit('/').next().unwrap_or(first);
    let args = &words[1..];
    if SHELLS.contains(&program) {
        // `bash -lc SCRIPT`: the script decides; a shell reading a file or stdin may do
        // anything.
        let mut rest = args.iter();
        for arg in rest.by_ref() {
            if arg.starts_with('-') && arg.contains('c') && !arg.starts_with("--") {
                return rest
                    .next()
                    .is_some_and(|script| read_only_script(script, depth + 1));
            }
            if !arg.starts_with('-') {
                return false;
            }
        }
        return false;
    }
    match program {
        // Only `sed -n 'N,Mp'`-like scripts: a sed script can write (`w`) or run (`e`).
        "sed" => {
            let mut script = None;
            for a in args {
                match *a {
                    "-n" | "--quiet" | "--silent" | "-E" | "-r" => {}
                    a if a.starts_with('-') => return false,
                    a if script.is_none() => script = Some(a),
                    _ => {}
                }
            }
            script.is_some_and(|s| {
                s.chars()
                    .all(|c| c.is_ascii_digit() || ",;$pq ".contains(c))
            })
        }
        "find" => !args.iter().any(|a| {
            matches!(
                *a,
                "-delete"
                    | "-exec"
                    | "-execdir"
                    | "-ok"
                    | "-okdir"
                    | "-fprint"
                    | "-fprint0"
                    | "-fprintf"
                    | "-fls"
            )
        }),
        "sort" | "tree" => !args.iter().any(|a| {
            a.starts_with("--output")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('o'))
        }),
        "git" => {
            // Global options first: `-C DIR`, `-c k=v`, `--no-pager`, `--git-dir=...`.
            let mut rest = args.iter();
            while let Some(arg) = rest.next() {
                match *arg {
                    // `-c core.fsmonitor=CMD` and friends run programs.
                    "-c" => return false,
                    a if a.starts_with("--config-env") || a.starts_with("--exec-path") => {
                        return false;
                    }
                    "-C" => {
                        rest.next();
                    }
                    a if a.starts_with('-') => {}
                    sub => {
                        return GIT_READ_ONLY.contains(&sub)
                            && !rest.any(|a| a.starts_with("--output"));
                    }
                }
            }
            false
        }
        _ => READ_ONLY_PROGRAMS.contains(&program),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, detail: &str) -> ToolUse {
        ToolUse::new(name, detail)
    }

    fn rules(mode: Mode, kind: Kind, tools: &[ToolUse], files: &[&str]) -> Vec<(Rule, String)> {
        let files: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
        audit(mode, kind, tools, &files)
            .into_iter()
            .map(|v| (v.rule, v.tool.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn an_observe_run_that_changed_files_breaks_a_rule_per_file() {
        let found = audit(
            Mode::Observe,
            Kind::Claude,
            &[tool("Read", "a.txt")],
            &["a.txt".into(), "b/c.rs".into()],
        );
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].rule, Rule::ObserveChangedFiles);
        assert_eq!(
            (found[1].tool.as_deref(), found[1].detail.as_str()),
            (None, "b/c.rs")
        );
        assert_eq!(
            found[1].to_string(),
            "changed b/c.rs (observe_changed_files)"
        );
        // The same diff in edit or execute is the run's work.
        for mode in [Mode::Edit, Mode::Execute] {
            assert!(audit(mode, Kind::Claude, &[], &["a.txt".into()]).is_empty());
        }
    }

    #[test]
    fn an_observe_run_may_not_use_a_writing_tool() {
        for (kind, name) in [
            (Kind::Claude, "Edit"),
            (Kind::Claude, "Write"),
            (Kind::Claude, "MultiEdit"),
            (Kind::Claude, "NotebookEdit"),
            (Kind::Codex, "file_change"),
            (Kind::Declared, "Write"),
        ] {
            assert_eq!(
                rules(Mode::Observe, kind, &[tool(name, "x.rs")], &[]),
                [(Rule::ObserveWrite, name.to_owned())],
                "{kind:?} {name}"
            );
            assert!(rules(Mode::Edit, kind, &[tool(name, "x.rs")], &[]).is_empty());
        }
        // A command that may write, in a Codex observe run.
        assert_eq!(
            rules(
                Mode::Observe,
                Kind::Codex,
                &[tool("command_execution", "bash -lc 'echo hi > notes.md'")],
                &[]
            ),
            [(Rule::ObserveWrite, "command_execution".to_owned())]
        );
    }

    #[test]
    fn observe_allows_reading_tools_and_codex_reading_commands_only() {
        let reads: Vec<ToolUse> = READ_TOOLS.iter().map(|n| tool(n, "")).collect();
        for kind in [Kind::Claude, Kind::Codex, Kind::Declared] {
            assert!(
                audit(Mode::Observe, kind, &reads, &[]).is_empty(),
                "{kind:?}"
            );
        }
        let cat = [tool(
            "command_execution",
            "bash -lc 'cat src/lib.rs | head -n 20'",
        )];
        assert!(audit(Mode::Observe, Kind::Codex, &cat, &[]).is_empty());
        // Claude's observe mode has no shell: even a reading Bash is outside it.
        assert_eq!(
            rules(Mode::Observe, Kind::Claude, &[tool("Bash", "ls")], &[]),
            [(Rule::OutsideAllowlist, "Bash".to_owned())]
        );
    }

    #[test]
    fn a_command_in_edit_mode_is_a_violation_and_fine_in_execute() {
        for (kind, name) in [
            (Kind::Claude, "Bash"),
            (Kind::Codex, "command_execution"),
            (Kind::Declared, "shell"),
        ] {
            let used = [
                tool("Read", "a"),
                tool("Edit", "a"),
                tool(name, "ls -la && python3 -c pass"),
            ];
            assert_eq!(
                rules(Mode::Edit, kind, &used, &[]),
                [(Rule::CommandInEdit, name.to_owned())],
                "{kind:?}"
            );
            assert!(audit(Mode::Execute, kind, &used, &["a".into()]).is_empty());
            // A command that only reads is reading: fine in edit for codex and CLIs,
            // which have no other way to read; claude has its Read tool.
            let reads = [tool(name, "ls -la")];
            assert_eq!(
                rules(Mode::Edit, kind, &reads, &[]).is_empty(),
                kind != Kind::Claude,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn mcp_and_unknown_tools_are_outside_every_allowlist_but_executes() {
        let used = [
            tool("mcp__github__create_issue", "{}"),
            tool("mcp_tool_call", "github/create_issue"),
            tool("KillShell", ""),
            tool("collab_tool_call", ""),
        ];
        for mode in [Mode::Observe, Mode::Edit] {
            let found = rules(mode, Kind::Claude, &used, &[]);
            assert_eq!(found.len(), 4, "{mode:?}");
            assert!(
                found
                    .iter()
                    .all(|(rule, _)| *rule == Rule::OutsideAllowlist)
            );
        }
        assert!(audit(Mode::Execute, Kind::Codex, &used, &[]).is_empty());
    }

    #[test]
    fn denied_tool_uses_never_ran_and_are_passed_over() {
        let mut bash = tool("Bash", "rm -rf /");
        bash.denied = true;
        assert!(audit(Mode::Edit, Kind::Claude, &[bash.clone()], &[]).is_empty());
        bash.denied = false;
        assert_eq!(audit(Mode::Edit, Kind::Claude, &[bash], &[]).len(), 1);
    }

    #[test]
    fn commands_are_read_only_only_when_every_part_reads() {
        for reads in [
            "ls -la",
            "bash -lc 'rg -n \"fn main\" src | head -n 5'",
            "/bin/zsh -lc \"sed -n '1,40p' src/lib.rs\"",
            "git --no-pager -C sub log --oneline -5 && git status",
            "cat a.txt 2>/dev/null || echo missing",
            "grep -r x . 2>&1 | wc -l",
            "cd src; find . -name '*.rs' -type f",
            "echo '>' not a redirection",
        ] {
            assert!(read_only_command(reads), "{reads}");
        }
        for writes in [
            "",
            "echo hi > notes.md",
            "bash -lc 'cat a >> b'",
            "sed -i s/a/b/ x.rs",
            "find . -name '*.tmp' -delete",
            "git commit -am x",
            "git diff --output=patch.diff",
            "rm -rf target",
            "python3 -c 'print(1)'",
            "cat $(ls)",
            "sort -o out.txt in.txt",
            "bash script.sh",
            "ls | tee listing.txt",
            "bash -lc 'echo unclosed",
            "cargo test",
            // Ways a reading program runs another or writes.
            "LANG=C sort names.txt",
            "GIT_EXTERNAL_DIFF=./x git diff",
            "rg --pre ./evil.sh x",
            "git -c core.fsmonitor='touch p' status",
            "git grep --open-files-in-pager=vi x",
            "git diff --ext-diff",
            "sed 's/.*/touch p/e' f",
            "sed -n 'w out' f",
            "sort --compress-program=gzip big",
            "file -C",
            "less f",
        ] {
            assert!(!read_only_command(writes), "{writes}");
        }
    }

    #[test]
    fn the_evidence_lists_violations_boundedly_and_counts_tools() {
        let mut summary = RunSummary::default();
        for _ in 0..3 {
            summary.record_tool(tool("Read", "a"));
        }
        summary.record_tool(tool("Bash", "ls"));
        summary.tools_dropped = 2;
        let many: Vec<Violation> = (0..VIOLATIONS_KEPT_MAX + 5)
            .map(|i| Violation {
                rule: Rule::ObserveChangedFiles,
                tool: None,
                detail: format!("f{i}"),
            })
            .collect();
        let audit = Audit::of(&summary, many);
        assert_eq!(audit.violations.len(), VIOLATIONS_KEPT_MAX);
        assert_eq!(audit.violations_more, 5);
        assert_eq!((audit.tools, audit.unaudited), (6, 2));
        assert_eq!(audit.by_name["Read"], 3);
        let json = serde_json::to_value(&audit).expect("json");
        assert_eq!(json["violations"][0]["rule"], "observe_changed_files");
        assert_eq!(json["violations"][0]["tool"], serde_json::Value::Null);
    }

    #[test]
    fn a_summary_keeps_notable_tool_uses_past_its_first_bound() {
        use crate::end::{TOOLS_KEPT_MAX, TOOLS_NOTABLE_MAX};
        let mut summary = RunSummary::default();
        for _ in 0..TOOLS_KEPT_MAX {
            assert!(summary.record_tool(tool("Read", "a")).is_some());
        }
        assert_eq!(summary.record_tool(tool("Edit", "a")), None);
        assert_eq!(
            summary.record_tool(tool("Bash", "rm -rf x")),
            Some(TOOLS_KEPT_MAX),
            "a command is kept past the first bound"
        );
        for _ in 0..TOOLS_NOTABLE_MAX {
            summary.record_tool(tool("mcp__x__y", ""));
        }
        assert_eq!(summary.tools.len(), TOOLS_KEPT_MAX + TOOLS_NOTABLE_MAX);
        assert_eq!(summary.tools_dropped, 2);
        // The command past the first bound is still audited.
        assert!(
            audit(Mode::Edit, Kind::Claude, &summary.tools, &[])
                .iter()
                .any(|v| v.rule == Rule::CommandInEdit)
        );
        let long = ToolUse::new("Bash", &"x".repeat(2_000));
        assert_eq!(long.detail.chars().count(), crate::end::TOOL_DETAIL_MAX + 1);
        assert!(long.detail.ends_with('…'));
    }
}
