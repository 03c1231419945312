//! Parsing of `team`: members of mixed providers working a board of tasks.
//!
//! ```yaml
//! team:
//!   members: [{name: alice, provider: claude}, {name: bob, provider: codex, mode: edit}]
//!   tasks: "{{ input.tasks }}"        # or a literal list of {id, title, detail, depends_on}
//!   repo: "{{ input.repo }}"
//!   parallel: 2                      # tasks in progress at once, each in its own lane
//!   check: { cmd: "cargo test" }     # the completion gate of every task (a verify)
//!   max_turns: 30                    # then the team parks until given more
//!   key: team                        # the wait key posts, claims and budget arrive on
//!   save: board
//! ```

use super::{Parser, describe};
use crate::definition::yaml::{Spanned, Value};
use crate::definition::{Node, NodeKind, Span, TeamMember, TeamSpec};

/// The provider that predicts which tasks of a board overlap (a team with `parallel`).
pub const PREDICT_PROVIDER: &str = "conflicts";
/// The provider that merges a member's lane back into the team's worktree.
pub const MERGE_PROVIDER: &str = "merge_lane";

/// Most members of one team.
pub const TEAM_MEMBERS_MAX: usize = 16;
/// A turn's timeout when the team gives none (30 min).
const TURN_TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;

impl Parser {
    pub(super) fn team(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "team",
            body,
            &[
                "name",
                "members",
                "tasks",
                "repo",
                "parallel",
                "check",
                "max_turns",
                "attempts",
                "turn_timeout",
                "key",
                "save",
            ],
        )?;
        let hint =
            "`team: { members: [{name: alice, provider: claude}], tasks: [{id: a, title: ...}] }`";
        let members_node = self.required(&options, "members", "team", span, hint)?;
        let tasks_node = self.required(&options, "tasks", "team", span, hint)?;
        let members = self.members(members_node)?;
        let tasks = self.value_template(tasks_node)?;
        let repo = match options.get("repo") {
            Some(node) => Some(self.value_template(node)?),
            None => None,
        };
        let check = match options.get("check") {
            Some(node) => {
                let mut call = self.check_call(node)?;
                // The check runs where the members worked: the team's repo, unless it
                // says where itself.
                if let (Some(repo), crate::definition::ValueTemplate::Map(args)) =
                    (&repo, &mut call.args)
                    && !args.iter().any(|(k, _)| k == "repo" || k == "cwd")
                {
                    args.push(("repo".to_owned(), repo.clone()));
                }
                Some(call)
            }
            None => None,
        };
        let parallel = match options.get("parallel") {
            Some(node) => {
                let parallel = self.count(node, "`parallel`", 1)?;
                if parallel as usize > TEAM_MEMBERS_MAX {
                    self.error(
                        node.span,
                        format!("`parallel` is at most {TEAM_MEMBERS_MAX}, found {parallel}"),
                        None,
                    );
                    return None;
                }
                parallel
            }
            None => 1,
        };
        let max_turns = match options.get("max_turns") {
            Some(node) => self.count(node, "`max_turns`", 1)?,
            None => 50,
        };
        let attempts = match options.get("attempts") {
            Some(node) => self.count(node, "`attempts`", 1)?,
            None => 3,
        };
        let turn_timeout_ms = match options.get("turn_timeout") {
            Some(node) => self.duration(node, "`turn_timeout`", false)?,
            None => TURN_TIMEOUT_MS_DEFAULT,
        };
        let (key, key_span) = match options.get("key") {
            Some(node) => (self.identifier(node, "`key`")?, node.span),
            None => ("team".to_owned(), span),
        };
        self.claim_wait_key(&key, key_span);
        let save = match options.get("save") {
            Some(node) => self.identifier(node, "`save`")?,
            None => "board".to_owned(),
        };
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Team(TeamSpec {
                members,
                tasks,
                repo,
                parallel,
                check,
                max_turns,
                attempts,
                turn_timeout_ms,
                key,
                save,
                budget: self.agent_budget.clone(),
            }),
            name,
            span,
        })
    }

    fn members(&mut self, node: &Spanned) -> Option<Vec<TeamMember>> {
        let Value::Seq(items) = &node.value else {
            self.error(
                node.span,
                format!(
                    "`members` must be a list of {{name, provider}}, found {}",
                    describe(node)
                ),
                None,
            );
            return None;
        };
        if items.is_empty() || items.len() > TEAM_MEMBERS_MAX {
            self.error(
                node.span,
                format!(
                    "a team has 1 to {TEAM_MEMBERS_MAX} members, found {}",
                    items.len()
                ),
                None,
            );
            return None;
        }
        let mut members: Vec<TeamMember> = Vec::new();
        for item in items {
            let Value::Map(entries) = &item.value else {
                self.error(
                    item.span,
                    format!(
                        "a member is `{{name, provider, mode, model}}`, found {}",
                        describe(item)
                    ),
                    None,
                );
                continue;
            };
            let options = self.options("member", entries, &["name", "provider", "mode", "model"]);
            let Some(name) = options
                .get("name")
                .and_then(|n| self.identifier(n, "member `name`"))
            else {
                self.error(item.span, "a member needs a `name`", None);
                continue;
            };
            let Some(provider) = options
                .get("provider")
                .and_then(|n| self.string(n, "`provider`"))
            else {
                self.error(
                    item.span,
                    format!("member `{name}` needs a `provider`"),
                    None,
                );
                continue;
            };
            let mode = match options.get("mode") {
                Some(n) => match n.as_str() {
                    Some(m @ ("observe" | "edit" | "execute")) => m.to_owned(),
                    _ => {
                        self.error(
                            n.span,
                            format!(
                                "`mode` must be observe, edit or execute, found {}",
                                describe(n)
                            ),
                            None,
                        );
                        continue;
                    }
                },
                None => "edit".to_owned(),
            };
            let model = options.get("model").and_then(|n| self.string(n, "`model`"));
            if members.iter().any(|m| m.name == name) {
                self.error(item.span, format!("two members are named `{name}`"), None);
                continue;
            }
            members.push(TeamMember {
                name,
                provider,
                mode,
                model,
            });
        }
        Some(members)
    }

    /// A team's `check`: the same shapes as `verify` (`"cmd"` or `{cmd, parser, ...}`).
    fn check_call(&mut self, node: &Spanned) -> Option<crate::definition::CallSpec> {
        if let Value::Map(entries) = &node.value
            && let Some((key, _)) = entries.iter().find(|(k, _)| k.as_str() == Some("save"))
        {
            self.error(
                key.span,
                "a team's check is kept on its board, not under `save`",
                None,
            );
            return None;
        }
        let (call, _, _) = self.verify_call(node.span, node)?;
        Some(call)
    }
}

/// The JSON Schema of a member's answer at the end of its turn.
pub fn turn_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "required": ["done"],
        "properties": {
            "done": {"type": "boolean"},
            "summary": {"type": "string"},
            "messages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["text"],
                    "properties": {"to": {"type": "string"}, "text": {"type": "string"}}
                }
            }
        }
    })
}
