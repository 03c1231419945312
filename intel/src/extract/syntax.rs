//! Extraction from a tree-sitter syntax tree: one pre-order walk per file that finds
//! declarations (per-language rules below), imports and identifier references.
//!
//! The walk is iterative with an explicit stack (no recursion, so a deeply nested file
//! cannot overflow the thread's stack) and visits nodes in source order, so reference
//! lines come out ascending.

use super::{
    DOC_CHARS_MAX, FileFacts, REFERENCE_BYTES_MIN, REFERENCES_PER_FILE_MAX, RawImport,
    SIGNATURE_CHARS_MAX, SYMBOLS_PER_FILE_MAX, Symbol, SymbolKind, collapse, count_lines,
};
use crate::lang::Language;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::OnceLock;
use tree_sitter::{Node, Tree};

/// Every node kind that `Walk::declaration`, `Walk::container` or `Walk::imports` looks
/// at. The walk tests a node's kind *id* against a per-grammar table built from this list
/// and compares kind strings only for these kinds: string matching on every node of a
/// file cost more than parsing it. A kind matched there but missing here is never seen.
const INTERESTING_KINDS: &[&str] = &[
    "abstract_class_declaration",
    "abstract_method_signature",
    "alias_declaration",
    "annotation_type_declaration",
    "arrow_function",
    "assignment",
    "call_expression",
    "class",
    "class_declaration",
    "class_definition",
    "class_specifier",
    "closure_expression",
    "compact_constructor_declaration",
    "const_item",
    "const_spec",
    "constructor_declaration",
    "declaration",
    "enum_declaration",
    "enum_item",
    "enum_specifier",
    "export_statement",
    "extern_crate_declaration",
    "field_declaration",
    "foreign_mod_item",
    "function",
    "function_declaration",
    "function_definition",
    "function_expression",
    "function_item",
    "function_signature",
    "function_signature_item",
    "generator_function_declaration",
    "impl_item",
    "import_declaration",
    "import_from_statement",
    "import_spec",
    "import_statement",
    "interface_declaration",
    "internal_module",
    "lambda_expression",
    "macro_definition",
    "method_declaration",
    "method_definition",
    "method_elem",
    "method_signature",
    "method_spec",
    "mod_item",
    "module",
    "namespace_definition",
    "preproc_def",
    "preproc_function_def",
    "preproc_include",
    "record_declaration",
    "static_item",
    "struct_item",
    "struct_specifier",
    "trait_item",
    "type_alias",
    "type_alias_declaration",
    "type_definition",
    "type_item",
    "type_spec",
    "union_item",
    "union_specifier",
    "use_declaration",
    "variable_declarator",
];

const FLAG_COMMENT: u8 = 1;
const FLAG_IDENTIFIER: u8 = 2;
const FLAG_INTERESTING: u8 = 4;

/// Flags per kind id of one grammar.
struct KindTable {
    flags: Vec<u8>,
}

/// One table per language, built on first use.
static KIND_TABLES: [OnceLock<KindTable>; 10] = [const { OnceLock::new() }; 10];

fn kind_table(language: Language) -> &'static KindTable {
    KIND_TABLES[language as usize].get_or_init(|| {
        let Some(grammar) = language.grammar() else {
            return KindTable { flags: Vec::new() };
        };
        let count = grammar.node_kind_count();
        let flags = (0..count)
            .map(|id| {
                let Some(kind) = u16::try_from(id)
                    .ok()
                    .and_then(|id| grammar.node_kind_for_id(id))
                else {
                    return 0;
                };
                let mut flags = 0;
                if is_comment(kind) {
                    flags |= FLAG_COMMENT;
                }
                if is_identifier(kind) {
                    flags |= FLAG_IDENTIFIER;
                }
                if INTERESTING_KINDS.contains(&kind) {
                    flags |= FLAG_INTERESTING;
                }
                flags
            })
            .collect();
        KindTable { flags }
    })
}

/// What encloses a node, for telling methods from functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Container {
    /// File or module level.
    Top,
    /// Inside an impl, class, struct or interface body: functions are methods.
    Type,
    /// Inside a Rust trait: functions are methods.
    Trait,
    /// Inside a function body: nested functions stay functions.
    Body,
}

/// The scope of a node. Cloned for every child pushed on the walk's stack, so the parent
/// name is shared (`Rc`), not copied.
#[derive(Clone, Debug)]
struct Scope {
    container: Container,
    parent: Option<Rc<str>>,
}

/// A declaration found at a node.
struct Declaration<'t> {
    kind: SymbolKind,
    name: Node<'t>,
    /// The name when it is not simply the name node's text (qualified C++ names).
    name_text: Option<String>,
    parent: Option<String>,
    /// What its children are inside of; `None` keeps the current scope.
    inner: Option<Scope>,
}

struct Walk<'a> {
    language: Language,
    src: &'a [u8],
    facts: FileFacts,
    occurrences: usize,
    declaration_names: HashSet<usize>,
    /// References while walking, keyed by slices of the source (no allocation per
    /// occurrence); turned into the sorted owned map at the end.
    references: HashMap<&'a str, Vec<u32>>,
}

/// Extracts the facts of one parsed file.
pub fn extract(language: Language, text: &str, tree: &Tree) -> FileFacts {
    let mut walk = Walk {
        language,
        src: text.as_bytes(),
        facts: FileFacts {
            lines: count_lines(text),
            syntax_errors: tree.root_node().has_error(),
            ..FileFacts::default()
        },
        occurrences: 0,
        declaration_names: HashSet::new(),
        references: HashMap::new(),
    };
    let root = tree.root_node();
    let mut stack: Vec<(Node<'_>, Scope)> = vec![(
        root,
        Scope {
            container: Container::Top,
            parent: None,
        },
    )];
    let mut children = Vec::new();
    let table = kind_table(language);
    while let Some((node, scope)) = stack.pop() {
        let flags = table
            .flags
            .get(usize::from(node.kind_id()))
            .copied()
            .unwrap_or(FLAG_INTERESTING | FLAG_IDENTIFIER);
        if flags & FLAG_COMMENT != 0 {
            continue;
        }
        let mut inner = scope.clone();
        if flags & FLAG_INTERESTING != 0 {
            let kind = node.kind();
            if let Some(declaration) = walk.declaration(node, kind, &scope) {
                walk.record(node, kind, &declaration);
                if let Some(next) = declaration.inner {
                    inner = next;
                }
            } else if let Some(next) = walk.container(node, kind, &scope) {
                inner = next;
            }
            walk.imports(node, kind);
        }
        if node.child_count() == 0 {
            if flags & FLAG_IDENTIFIER != 0 && !walk.declaration_names.contains(&node.id()) {
                let name = walk.text(node);
                walk.reference(name, line_of(node));
            }
            continue;
        }
        // Anonymous nodes (keywords, punctuation) declare, import and name nothing.
        let mut cursor = node.walk();
        children.clear();
        children.extend(node.named_children(&mut cursor));
        for child in children.drain(..).rev() {
            stack.push((child, inner.clone()));
        }
    }
    walk.facts.symbols.sort_by_key(|s| (s.line, s.end_line));
    walk.facts.references = walk
        .references
        .into_iter()
        .map(|(name, lines)| (name.to_owned(), lines))
        .collect();
    walk.facts
}

fn owned(parent: &Option<Rc<str>>) -> Option<String> {
    parent.as_deref().map(str::to_owned)
}

fn last_named_child(node: Node<'_>) -> Option<Node<'_>> {
    let count = u32::try_from(node.named_child_count()).ok()?;
    node.named_child(count.checked_sub(1)?)
}

fn line_of(node: Node<'_>) -> u32 {
    u32::try_from(node.start_position().row + 1).unwrap_or(u32::MAX)
}

fn end_line_of(node: Node<'_>) -> u32 {
    let end = node.end_position();
    // A node that ends with its newline (a C `#define`) ends on the line before.
    let row = if end.column == 0 && end.row > node.start_position().row {
        end.row
    } else {
        end.row + 1
    };
    u32::try_from(row).unwrap_or(u32::MAX)
}

fn is_comment(kind: &str) -> bool {
    matches!(
        kind,
        "comment" | "line_comment" | "block_comment" | "html_comment"
    )
}

fn is_identifier(kind: &str) -> bool {
    matches!(
        kind,
        "identifier"
            | "type_identifier"
            | "field_identifier"
            | "property_identifier"
            | "private_property_identifier"
            | "shorthand_property_identifier"
            | "shorthand_property_identifier_pattern"
            | "namespace_identifier"
            | "package_identifier"
            | "constant"
    )
}

impl<'a> Walk<'a> {
    fn text(&self, node: Node<'_>) -> &'a str {
        node.utf8_text(self.src).unwrap_or("")
    }

    /// One identifier occurrence (bounded by `REFERENCES_PER_FILE_MAX`).
    fn reference(&mut self, name: &'a str, line: u32) {
        if name.len() < REFERENCE_BYTES_MIN {
            return;
        }
        if self.occurrences >= REFERENCES_PER_FILE_MAX {
            self.facts.references_dropped = self.facts.references_dropped.saturating_add(1);
            return;
        }
        self.occurrences += 1;
        let lines = self.references.entry(name).or_default();
        if lines.last() != Some(&line) {
            lines.push(line);
        }
    }

    fn field<'t>(node: Node<'t>, name: &str) -> Option<Node<'t>> {
        node.child_by_field_name(name)
    }

    fn record(&mut self, node: Node<'_>, kind: &str, declaration: &Declaration<'_>) {
        self.declaration_names.insert(declaration.name.id());
        if self.facts.symbols.len() >= SYMBOLS_PER_FILE_MAX {
            return;
        }
        let name = declaration
            .name_text
            .clone()
            .unwrap_or_else(|| self.text(declaration.name).to_owned());
        if name.is_empty() {
            return;
        }
        let mut signature = self.signature(node);
        if self.language == Language::Go && matches!(kind, "type_spec" | "type_alias") {
            signature = format!("type {signature}");
        }
        let symbol = Symbol {
            kind: declaration.kind,
            name,
            parent: declaration.parent.clone(),
            signature,
            doc: self.doc(node),
            line: line_of(node),
            end_line: end_line_of(node),
        };
        self.facts.symbols.push(symbol);
    }

    /// The declaration text up to its body, whitespace collapsed.
    fn signature(&self, node: Node<'_>) -> String {
        let body = ["body", "value"]
            .iter()
            .find_map(|f| Self::field(node, f))
            .filter(|b| {
                matches!(
                    b.kind(),
                    "block"
                        | "declaration_list"
                        | "field_declaration_list"
                        | "enum_variant_list"
                        | "class_body"
                        | "interface_body"
                        | "enum_body"
                        | "statement_block"
                        | "compound_statement"
                        | "object_type"
                        | "enumerator_list"
                        | "record_declaration_body"
                        | "constructor_body"
                        | "annotation_type_body"
                        | "struct_type"
                        | "interface_type"
                ) && b.start_byte() > node.start_byte()
            });
        let end = match body {
            Some(body) => body.start_byte(),
            None => {
                // No recognised body: the first line.
                let text = self.text(node);
                node.start_byte() + text.find('\n').unwrap_or(text.len())
            }
        };
        let raw = self
            .src
            .get(node.start_byte()..end)
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        let trimmed = raw.trim().trim_end_matches(['{', ':']).trim_end();
        collapse(trimmed, SIGNATURE_CHARS_MAX)
    }

    /// The doc comment: a Python docstring, else the comments right above the node.
    fn doc(&self, node: Node<'_>) -> Option<String> {
        if self.language == Language::Python {
            return self.docstring(node);
        }
        // Decorated or templated declarations: comments sit above the wrapper.
        let mut anchor = node;
        while let Some(parent) = anchor.parent() {
            if matches!(
                parent.kind(),
                "template_declaration"
                    | "export_statement"
                    | "decorated_definition"
                    | "type_declaration"
                    | "const_declaration"
            ) {
                anchor = parent;
            } else {
                break;
            }
        }
        let mut lines: Vec<String> = Vec::new();
        let mut next_row = anchor.start_position().row;
        let mut sibling = anchor.prev_sibling();
        while let Some(current) = sibling {
            let kind = current.kind();
            if matches!(kind, "attribute_item" | "decorator" | "annotation") {
                next_row = current.start_position().row;
                sibling = current.prev_sibling();
                continue;
            }
            if !is_comment(kind) || current.end_position().row + 1 < next_row {
                break;
            }
            let text = self.text(current);
            if self.language == Language::Rust
                && !(text.starts_with("///") || text.starts_with("/**"))
            {
                break;
            }
            lines.push(strip_comment(text));
            next_row = current.start_position().row;
            sibling = current.prev_sibling();
        }
        if lines.is_empty() {
            return None;
        }
        lines.reverse();
        let doc = lines.join("\n").trim().to_owned();
        (!doc.is_empty()).then(|| cut(&doc, DOC_CHARS_MAX))
    }

    fn docstring(&self, node: Node<'_>) -> Option<String> {
        let body = Self::field(node, "body")?;
        let first = body.named_child(0)?;
        if first.kind() != "expression_statement" {
            return None;
        }
        let string = first.named_child(0)?;
        if string.kind() != "string" {
            return None;
        }
        let text = self.text(string);
        let inner = text
            .trim_start_matches(['r', 'R', 'u', 'U', 'b', 'B'])
            .trim_start_matches("\"\"\"")
            .trim_start_matches("'''")
            .trim_end_matches("\"\"\"")
            .trim_end_matches("'''")
            .trim_matches(['"', '\'']);
        let doc = inner
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_owned();
        (!doc.is_empty()).then(|| cut(&doc, DOC_CHARS_MAX))
    }

    /// A node that changes the scope without declaring anything (a Rust impl block).
    fn container(&self, node: Node<'_>, kind: &str, scope: &Scope) -> Option<Scope> {
        match (self.language, kind) {
            (Language::Rust, "impl_item") => {
                let target = Self::field(node, "type").map(|t| Rc::from(self.type_name(t)));
                Some(Scope {
                    container: Container::Type,
                    parent: target,
                })
            }
            (Language::Rust, "foreign_mod_item") => Some(scope.clone()),
            (
                _,
                "function_item"
                | "function_definition"
                | "function_declaration"
                | "method_declaration"
                | "method_definition"
                | "arrow_function"
                | "function_expression"
                | "lambda_expression"
                | "constructor_declaration"
                | "closure_expression",
            ) => Some(Scope {
                container: Container::Body,
                parent: scope.parent.clone(),
            }),
            _ => None,
        }
    }

    /// The plain name of a type expression (`Foo<T>` → `Foo`, `&mut Bar` → `Bar`).
    fn type_name(&self, node: Node<'_>) -> String {
        let mut current = node;
        // Bounded: each step goes to a strictly smaller child.
        while matches!(
            current.kind(),
            "generic_type" | "reference_type" | "pointer_type" | "scoped_type_identifier"
        ) {
            let next = Self::field(current, "type")
                .or_else(|| Self::field(current, "name"))
                .or_else(|| last_named_child(current));
            match next {
                Some(next) if next.id() != current.id() => current = next,
                _ => break,
            }
        }
        self.text(current).to_owned()
    }

    fn declaration<'t>(
        &self,
        node: Node<'t>,
        kind: &str,
        scope: &Scope,
    ) -> Option<Declaration<'t>> {
        match self.language {
            Language::Rust => self.rust(node, kind, scope),
            Language::Python => self.python(node, kind, scope),
            Language::Go => self.go(node, kind),
            Language::JavaScript | Language::TypeScript | Language::Tsx => {
                self.javascript(node, kind, scope)
            }
            Language::Java => self.java(node, kind, scope),
            Language::C | Language::Cpp => self.c_family(node, kind, scope),
            Language::Text => None,
        }
    }

    fn simple<'t>(
        node: Node<'t>,
        kind: SymbolKind,
        parent: Option<String>,
        inner: Option<Scope>,
    ) -> Option<Declaration<'t>> {
        Some(Declaration {
            kind,
            name: Self::field(node, "name")?,
            name_text: None,
            parent,
            inner,
        })
    }

    fn in_type(scope: &Scope) -> bool {
        matches!(scope.container, Container::Type | Container::Trait)
    }

    fn body_scope(scope: &Scope) -> Option<Scope> {
        Some(Scope {
            container: Container::Body,
            parent: scope.parent.clone(),
        })
    }

    fn rust<'t>(&self, node: Node<'t>, kind: &str, scope: &Scope) -> Option<Declaration<'t>> {
        let type_scope = |name: Option<Node<'t>>, container| {
            Some(Scope {
                container,
                parent: name.map(|n| Rc::from(self.text(n))),
            })
        };
        match kind {
            "function_item" | "function_signature_item" => {
                let kind = if Self::in_type(scope) {
                    SymbolKind::Method
                } else {
                    SymbolKind::Function
                };
                let parent = Self::in_type(scope).then(|| owned(&scope.parent)).flatten();
                Self::simple(node, kind, parent, Self::body_scope(scope))
            }
            "struct_item" | "union_item" => Self::simple(
                node,
                SymbolKind::Struct,
                None,
                type_scope(Self::field(node, "name"), Container::Body),
            ),
            "enum_item" => Self::simple(
                node,
                SymbolKind::Enum,
                None,
                type_scope(Self::field(node, "name"), Container::Body),
            ),
            "trait_item" => Self::simple(
                node,
                SymbolKind::Trait,
                None,
                type_scope(Self::field(node, "name"), Container::Trait),
            ),
            "mod_item" => Self::simple(
                node,
                SymbolKind::Module,
                None,
                type_scope(Self::field(node, "name"), Container::Top),
            ),
            "macro_definition" => Self::simple(node, SymbolKind::Macro, None, None),
            "type_item" if !Self::in_type(scope) => {
                Self::simple(node, SymbolKind::Type, None, None)
            }
            "const_item" | "static_item" if scope.container != Container::Body => {
                Self::simple(node, SymbolKind::Constant, None, None)
            }
            _ => None,
        }
    }

    fn python<'t>(&self, node: Node<'t>, kind: &str, scope: &Scope) -> Option<Declaration<'t>> {
        match kind {
            "function_definition" => {
                let kind = if scope.container == Container::Type {
                    SymbolKind::Method
                } else {
                    SymbolKind::Function
                };
                let parent = (kind == SymbolKind::Method)
                    .then(|| owned(&scope.parent))
                    .flatten();
                Self::simple(node, kind, parent, Self::body_scope(scope))
            }
            // `name = lambda ...` at module or class level is a function (as ctags says).
            "assignment" if scope.container != Container::Body => {
                let name = Self::field(node, "left").filter(|l| l.kind() == "identifier")?;
                if Self::field(node, "right")?.kind() != "lambda" {
                    return None;
                }
                let kind = if scope.container == Container::Type {
                    SymbolKind::Method
                } else {
                    SymbolKind::Function
                };
                Some(Declaration {
                    kind,
                    name,
                    name_text: None,
                    parent: None,
                    inner: None,
                })
            }
            "class_definition" => {
                let name = Self::field(node, "name")?;
                Self::simple(
                    node,
                    SymbolKind::Class,
                    None,
                    Some(Scope {
                        container: Container::Type,
                        parent: Some(Rc::from(self.text(name))),
                    }),
                )
            }
            _ => None,
        }
    }

    fn go<'t>(&self, node: Node<'t>, kind: &str) -> Option<Declaration<'t>> {
        match kind {
            "function_declaration" => Self::simple(node, SymbolKind::Function, None, None),
            "method_declaration" => {
                let receiver = Self::field(node, "receiver").and_then(|r| {
                    let parameter = r.named_child(0)?;
                    Self::field(parameter, "type").map(|t| self.type_name(t))
                });
                Self::simple(node, SymbolKind::Method, receiver, None)
            }
            "type_spec" | "type_alias" => {
                let kind = match Self::field(node, "type").map(|t| t.kind()) {
                    Some("struct_type") => SymbolKind::Struct,
                    Some("interface_type") => SymbolKind::Interface,
                    _ => SymbolKind::Type,
                };
                let name = Self::field(node, "name")?;
                Self::simple(
                    node,
                    kind,
                    None,
                    Some(Scope {
                        container: Container::Type,
                        parent: Some(Rc::from(self.text(name))),
                    }),
                )
            }
            "method_elem" | "method_spec" => {
                let parent = node
                    .parent()
                    .and_then(|p| p.parent())
                    .and_then(|t| Self::field(t, "name"))
                    .map(|n| self.text(n).to_owned());
                Self::simple(node, SymbolKind::Method, parent, None)
            }
            "const_spec" => {
                let parent = node.parent()?;
                if parent.parent().is_some_and(|g| g.kind() != "source_file") {
                    return None;
                }
                Some(Declaration {
                    kind: SymbolKind::Constant,
                    name: Self::field(node, "name")?,
                    name_text: None,
                    parent: None,
                    inner: None,
                })
            }
            _ => None,
        }
    }

    fn javascript<'t>(&self, node: Node<'t>, kind: &str, scope: &Scope) -> Option<Declaration<'t>> {
        let class_scope = |name: Node<'t>| {
            Some(Scope {
                container: Container::Type,
                parent: Some(Rc::from(self.text(name))),
            })
        };
        match kind {
            "function_declaration" | "generator_function_declaration" | "function_signature" => {
                Self::simple(node, SymbolKind::Function, None, Self::body_scope(scope))
            }
            "class_declaration" | "abstract_class_declaration" | "class" => {
                let name = Self::field(node, "name")?;
                Self::simple(node, SymbolKind::Class, None, class_scope(name))
            }
            "method_definition" | "method_signature" | "abstract_method_signature" => {
                let parent = owned(&scope.parent);
                Self::simple(node, SymbolKind::Method, parent, Self::body_scope(scope))
            }
            "interface_declaration" => {
                let name = Self::field(node, "name")?;
                Self::simple(node, SymbolKind::Interface, None, class_scope(name))
            }
            "type_alias_declaration" => Self::simple(node, SymbolKind::Type, None, None),
            "enum_declaration" => Self::simple(node, SymbolKind::Enum, None, None),
            "internal_module" | "module" => Self::simple(
                node,
                SymbolKind::Module,
                None,
                Some(Scope {
                    container: Container::Top,
                    parent: None,
                }),
            ),
            "variable_declarator" if scope.container != Container::Type => {
                let value = Self::field(node, "value")?;
                let name = Self::field(node, "name")?;
                if name.kind() != "identifier" {
                    return None;
                }
                match value.kind() {
                    "arrow_function"
                    | "function_expression"
                    | "function"
                    | "generator_function" => Some(Declaration {
                        kind: SymbolKind::Function,
                        name,
                        name_text: None,
                        parent: None,
                        inner: Self::body_scope(scope),
                    }),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn java<'t>(&self, node: Node<'t>, kind: &str, scope: &Scope) -> Option<Declaration<'t>> {
        let type_scope = |kind| {
            let name = Self::field(node, "name")?;
            Self::simple(
                node,
                kind,
                None,
                Some(Scope {
                    container: Container::Type,
                    parent: Some(Rc::from(self.text(name))),
                }),
            )
        };
        match kind {
            "class_declaration" | "record_declaration" => type_scope(SymbolKind::Class),
            "interface_declaration" | "annotation_type_declaration" => {
                type_scope(SymbolKind::Interface)
            }
            "enum_declaration" => type_scope(SymbolKind::Enum),
            "method_declaration"
            | "constructor_declaration"
            | "compact_constructor_declaration" => Self::simple(
                node,
                SymbolKind::Method,
                owned(&scope.parent),
                Self::body_scope(scope),
            ),
            _ => None,
        }
    }

    /// The identifier a C declarator declares, with the scope of a qualified name.
    fn declarator_name<'t>(&self, node: Node<'t>) -> Option<(Node<'t>, Option<String>)> {
        let mut current = node;
        for _ in 0..32 {
            match current.kind() {
                "identifier" | "field_identifier" | "type_identifier" | "destructor_name"
                | "operator_name" | "primitive_type" => return Some((current, None)),
                "qualified_identifier" => {
                    let scope = Self::field(current, "scope").map(|s| self.text(s).to_owned());
                    let name = Self::field(current, "name")?;
                    let (leaf, inner) = self.declarator_name(name)?;
                    let full_scope = match (scope, inner) {
                        (Some(a), Some(b)) => Some(format!("{a}::{b}")),
                        (a, b) => a.or(b),
                    };
                    return Some((leaf, full_scope));
                }
                "template_function" | "template_type" => current = Self::field(current, "name")?,
                "parenthesized_declarator" => current = current.named_child(0)?,
                _ => {
                    current =
                        Self::field(current, "declarator").or_else(|| last_named_child(current))?
                }
            }
        }
        None
    }

    fn c_family<'t>(&self, node: Node<'t>, kind: &str, scope: &Scope) -> Option<Declaration<'t>> {
        let cpp = self.language == Language::Cpp;
        match kind {
            "function_definition" => {
                let declarator = Self::field(node, "declarator")?;
                let (name, qualifier) = self.declarator_name(declarator)?;
                let method = qualifier.is_some() || Self::in_type(scope);
                let parent = qualifier
                    .or_else(|| Self::in_type(scope).then(|| owned(&scope.parent)).flatten());
                Some(Declaration {
                    kind: if method {
                        SymbolKind::Method
                    } else {
                        SymbolKind::Function
                    },
                    name,
                    name_text: None,
                    parent,
                    inner: Self::body_scope(scope),
                })
            }
            "field_declaration" if cpp && Self::in_type(scope) => {
                let declarator = Self::field(node, "declarator")?;
                if declarator.kind() != "function_declarator" {
                    return None;
                }
                let (name, _) = self.declarator_name(declarator)?;
                Some(Declaration {
                    kind: SymbolKind::Method,
                    name,
                    name_text: None,
                    parent: owned(&scope.parent),
                    inner: None,
                })
            }
            "struct_specifier" | "union_specifier" | "class_specifier"
                if Self::field(node, "body").is_some() =>
            {
                let name = Self::field(node, "name")?;
                let kind = if kind == "class_specifier" {
                    SymbolKind::Class
                } else {
                    SymbolKind::Struct
                };
                let (leaf, _) = self.declarator_name(name).unwrap_or((name, None));
                Some(Declaration {
                    kind,
                    name: leaf,
                    name_text: None,
                    parent: None,
                    inner: Some(Scope {
                        container: Container::Type,
                        parent: Some(Rc::from(self.text(leaf))),
                    }),
                })
            }
            "enum_specifier" if Self::field(node, "body").is_some() => {
                Self::simple(node, SymbolKind::Enum, None, None)
            }
            "type_definition" => {
                let declarator = Self::field(node, "declarator")?;
                let (name, _) = self.declarator_name(declarator)?;
                Some(Declaration {
                    kind: SymbolKind::Type,
                    name,
                    name_text: None,
                    parent: None,
                    inner: None,
                })
            }
            "alias_declaration" => Self::simple(node, SymbolKind::Type, None, None),
            "namespace_definition" => {
                let name = Self::field(node, "name")?;
                Some(Declaration {
                    kind: SymbolKind::Module,
                    name,
                    name_text: None,
                    parent: None,
                    inner: Some(Scope {
                        container: Container::Top,
                        parent: Some(Rc::from(self.text(name))),
                    }),
                })
            }
            "preproc_def" | "preproc_function_def" => {
                let name = Self::field(node, "name")?;
                let text = self.text(name);
                let guard = Self::field(node, "value").is_none()
                    && ["_H", "_H_", "_HPP", "_HPP_", "_INCLUDED"]
                        .iter()
                        .any(|s| text.ends_with(s));
                // Include guards declare nothing a reader looks for.
                if guard {
                    return None;
                }
                Self::simple(node, SymbolKind::Macro, None, None)
            }
            "declaration" if scope.container == Container::Top => {
                // A prototype (`int add(int a, int b);`), typically in a header.
                let declarator = Self::field(node, "declarator")?;
                if declarator.kind() != "function_declarator" {
                    return None;
                }
                let (name, qualifier) = self.declarator_name(declarator)?;
                Some(Declaration {
                    kind: if qualifier.is_some() {
                        SymbolKind::Method
                    } else {
                        SymbolKind::Function
                    },
                    name,
                    name_text: None,
                    parent: qualifier,
                    inner: None,
                })
            }
            _ => None,
        }
    }

    /// Records the imports a node makes, as written.
    fn imports(&mut self, node: Node<'_>, kind: &str) {
        let line = line_of(node);
        let mut found: Vec<String> = Vec::new();
        let add = |found: &mut Vec<String>, module: String| {
            let module = module.trim().to_owned();
            if !module.is_empty() {
                found.push(module);
            }
        };
        match (self.language, kind) {
            (Language::Rust, "use_declaration") => {
                if let Some(argument) = Self::field(node, "argument") {
                    let mut text = tighten(&collapse(self.text(argument), 400));
                    // Inside an inline `mod tests { use super::*; }`, each `super` first
                    // climbs out of an inline module, which lives in this same file.
                    let mut inline_depth = 0;
                    let mut ancestor = node.parent();
                    while let Some(current) = ancestor {
                        if current.kind() == "mod_item" {
                            inline_depth += 1;
                        }
                        ancestor = current.parent();
                    }
                    let mut climbed = false;
                    while inline_depth > 0 {
                        match text
                            .strip_prefix("super::")
                            .or_else(|| (text == "super").then_some(""))
                        {
                            Some(rest) => {
                                text = rest.to_owned();
                                inline_depth -= 1;
                                climbed = true;
                            }
                            None => break,
                        }
                    }
                    if climbed && !text.starts_with("super") {
                        text = if text.is_empty() {
                            "self".to_owned()
                        } else {
                            format!("self::{text}")
                        };
                    }
                    for path in expand_rust_use(&text) {
                        add(&mut found, path);
                    }
                }
            }
            (Language::Rust, "mod_item") if Self::field(node, "body").is_none() => {
                if let Some(name) = Self::field(node, "name") {
                    add(&mut found, format!("mod {}", self.text(name)));
                }
            }
            (Language::Rust, "extern_crate_declaration") => {
                if let Some(name) = Self::field(node, "name") {
                    add(&mut found, self.text(name).to_owned());
                }
            }
            (Language::Python, "import_statement") => {
                let mut cursor = node.walk();
                for name in node.children_by_field_name("name", &mut cursor) {
                    let module = match name.kind() {
                        "aliased_import" => Self::field(name, "name").map(|n| self.text(n)),
                        _ => Some(self.text(name)),
                    };
                    if let Some(module) = module {
                        add(&mut found, module.to_owned());
                    }
                }
            }
            (Language::Python, "import_from_statement") => {
                if let Some(module) = Self::field(node, "module_name") {
                    let base = self.text(module).to_owned();
                    // `from . import x` names modules; `from .m import x` names items.
                    if base.chars().all(|c| c == '.') {
                        let mut cursor = node.walk();
                        for name in node.children_by_field_name("name", &mut cursor) {
                            let item = match name.kind() {
                                "aliased_import" => Self::field(name, "name").map(|n| self.text(n)),
                                _ => Some(self.text(name)),
                            };
                            if let Some(item) = item {
                                add(&mut found, format!("{base}{item}"));
                            }
                        }
                    } else {
                        add(&mut found, base);
                    }
                }
            }
            (Language::Go, "import_spec") => {
                if let Some(path) = Self::field(node, "path") {
                    add(&mut found, unquote(self.text(path)));
                }
            }
            (language, "import_statement" | "export_statement")
                if language.is_javascript_family() =>
            {
                if let Some(source) = Self::field(node, "source") {
                    add(&mut found, unquote(self.text(source)));
                }
            }
            (language, "call_expression") if language.is_javascript_family() => {
                let function = Self::field(node, "function");
                let is_require = function.is_some_and(|f| {
                    matches!(self.text(f), "require" | "import") || f.kind() == "import"
                });
                if is_require
                    && let Some(argument) = Self::field(node, "arguments")
                        .and_then(|a| a.named_child(0))
                        .filter(|a| a.kind() == "string")
                {
                    add(&mut found, unquote(self.text(argument)));
                }
            }
            (Language::Java, "import_declaration") => {
                let text = self.text(node);
                let body = text
                    .trim_start_matches("import")
                    .trim()
                    .trim_start_matches("static ")
                    .trim_end_matches(';')
                    .trim();
                add(&mut found, body.replace(' ', ""));
            }
            (Language::C | Language::Cpp, "preproc_include") => {
                if let Some(path) = Self::field(node, "path") {
                    let text = self.text(path).trim();
                    // System headers keep their angle brackets: they never resolve.
                    let module = if path.kind() == "system_lib_string" {
                        text.to_owned()
                    } else {
                        unquote(text)
                    };
                    add(&mut found, module);
                }
            }
            _ => {}
        }
        self.facts
            .imports
            .extend(found.into_iter().map(|module| RawImport { module, line }));
    }
}

/// Removes the spaces next to `::`, braces and commas, keeping those around `as`.
fn tighten(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let before = i.checked_sub(1).and_then(|j| chars.get(j)).copied();
            let after = chars.get(i + 1).copied();
            let tight = |x: Option<char>| matches!(x, Some(':' | '{' | '}' | ','));
            if tight(before) || tight(after) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn unquote(text: &str) -> String {
    text.trim().trim_matches(['"', '\'', '`']).to_owned()
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

/// Strips comment markers from a comment's text, line by line.
fn strip_comment(text: &str) -> String {
    let text = text.trim();
    let text = text
        .strip_prefix("/**")
        .or_else(|| text.strip_prefix("/*"))
        .map(|t| t.strip_suffix("*/").unwrap_or(t))
        .unwrap_or(text);
    text.lines()
        .map(|line| {
            let line = line.trim();
            let line = line
                .strip_prefix("///")
                .or_else(|| line.strip_prefix("//!"))
                .or_else(|| line.strip_prefix("//"))
                .or_else(|| line.strip_prefix('*'))
                .unwrap_or(line);
            line.strip_prefix(' ').unwrap_or(line).trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a Rust `use` tree into paths: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
pub(crate) fn expand_rust_use(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    expand_into("", text, &mut out, 0);
    out
}

const USE_NESTING_MAX: usize = 16;

fn expand_into(prefix: &str, text: &str, out: &mut Vec<String>, depth: usize) {
    if depth > USE_NESTING_MAX {
        return;
    }
    let text = text.trim();
    let join = |rest: &str| {
        if prefix.is_empty() {
            rest.to_owned()
        } else if rest.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}::{rest}")
        }
    };
    match text.find('{') {
        Some(open) if text.ends_with('}') => {
            let head = text[..open].trim_end_matches("::");
            let inner = &text[open + 1..text.len() - 1];
            let base = join(head);
            for part in split_top_level(inner) {
                expand_into(&base, part, out, depth + 1);
            }
        }
        _ => {
            let path = text.split(" as ").next().unwrap_or(text).trim();
            let path = path.trim_end_matches("::*");
            if path == "self" {
                out.push(if prefix.is_empty() { "self" } else { prefix }.to_owned());
            } else if !path.is_empty() {
                out.push(join(path));
            }
        }
    }
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}
