//! The crate's layers, checked from the source text so that later work cannot quietly
//! turn an arrow around:
//!
//! - between the folders (and top-level files) of src/core, no cycle of any length;
//! - bin → report → analysis → core: core uses none of analysis, report or doors;
//!   analysis uses only core; report uses only analysis and core and never exits the
//!   process; doors use neither analysis nor report.
//!
//! Every `crate::…`, `stagefrontier::…` and `super::…` path is read, `use` trees with
//! braces included, with comments, strings and character literals left out and inline
//! `mod name { … }` blocks followed so that `super` lands where the compiler says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A path found in a file, made absolute from the crate root (`crate::a::b` is `[a, b]`).
#[derive(Clone, Debug, PartialEq)]
struct Reference {
    segments: Vec<String>,
    line: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    /// `!`: a macro call after a name.
    Bang,
    /// `(`: a call after a name.
    Call,
    Other,
}

/// The tokens that matter for paths, each with its line; comments, strings, byte strings,
/// raw strings and character literals are dropped.
fn tokens(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(chars[i] == '\n');
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(&chars, i + 1, &mut line),
            'r' | 'b' if raw_string_start(&chars, i).is_some() => {
                let (hashes, quote) = raw_string_start(&chars, i).unwrap();
                i = quote + 1;
                let closing: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
                while i < chars.len() && !chars[i..].starts_with(&closing) {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
                i += closing.len();
            }
            'b' if at(i + 1) == '"' => i = skip_string(&chars, i + 2, &mut line),
            'b' if at(i + 1) == '\'' => i = skip_char(&chars, i + 1),
            '\'' => i = skip_char(&chars, i),
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((Token::Ident(chars[start..i].iter().collect()), line));
            }
            ':' if at(i + 1) == ':' => {
                out.push((Token::PathSep, line));
                i += 2;
            }
            '{' | '}' | ',' => {
                out.push((
                    match c {
                        '{' => Token::Open,
                        '}' => Token::Close,
                        _ => Token::Comma,
                    },
                    line,
                ));
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '!' | '(' => {
                out.push((if c == '!' { Token::Bang } else { Token::Call }, line));
                i += 1;
            }
            _ => {
                out.push((Token::Other, line));
                i += 1;
            }
        }
    }
    out
}

/// Past the closing quote of a string whose body starts at `i`.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() && chars[i] != '"' {
        *line += usize::from(chars[i] == '\n');
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// `r"`, `r#"`, `br##"`…: the number of hashes and the index of the opening quote.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i + usize::from(chars[i] == 'b');
    if chars.get(j) != Some(&'r') || (i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')) {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    (chars.get(j + hashes) == Some(&'"')).then_some((hashes, j + hashes))
}

/// Past a character literal at `i` (the quote); a lifetime (`'a`) is left as it is.
fn skip_char(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let close = chars[i + 2..].iter().position(|&c| c == '\'').map_or(chars.len(), |p| i + 2 + p);
        return close + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i + 1
}

/// Every path of `source`, a file whose own module path is `module` (`["core", "log"]`
/// for src/core/log/mod.rs). `crate_name` is what `crate::` means there: the library's
/// root for library files, nothing for the `sf` binary's (its paths stay inside it).
fn references(source: &str, module: &[String], in_library: bool) -> Vec<Reference> {
    let toks = tokens(source);
    let mut found = Vec::new();
    // Inline `mod name {` blocks open at brace depth `depth`.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Open, _))) = (toks.get(i + 1), toks.get(i + 2)) {
                    inline.push((name.clone(), depth));
                }
            }
            Token::Ident(word) if starts_path(&toks, i) && !follows_path_sep(&toks, i) => {
                let base: Option<Vec<String>> = match word.as_str() {
                    "crate" if in_library => Some(Vec::new()),
                    "stagefrontier" => Some(Vec::new()),
                    "super" => {
                        let mut here: Vec<String> = module.to_vec();
                        here.extend(inline.iter().map(|(name, _)| name.clone()));
                        Some(here)
                    }
                    _ => None,
                };
                if let Some(base) = base {
                    let line = toks[i].1;
                    let start = if word == "super" { i } else { i + 2 };
                    let (paths, next) = use_tree(&toks, start);
                    for path in paths {
                        found.push(Reference { segments: resolve(&base, &path), line });
                    }
                    i = next;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

fn starts_path(toks: &[(Token, usize)], i: usize) -> bool {
    matches!(toks.get(i + 1), Some((Token::PathSep, _)))
}

/// `x::crate` never happens, but `a::super` is not a new path either.
fn follows_path_sep(toks: &[(Token, usize)], i: usize) -> bool {
    i > 0 && toks[i - 1].0 == Token::PathSep
}

/// The paths of a use tree (or of a plain path in code) starting at token `i`: segments
/// joined by `::`, a brace group of trees, or `*`. Returns them and the index after.
fn use_tree(toks: &[(Token, usize)], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Token::Ident(segment)) => {
                prefix.push(segment.clone());
                i += 1;
                if matches!(toks.get(i), Some((Token::PathSep, _))) {
                    i += 1;
                    continue;
                }
                // `use a::b as c`: the alias is not part of the path.
                return (vec![prefix], i);
            }
            Some(Token::Open) => {
                let mut paths = Vec::new();
                i += 1;
                while i < toks.len() && toks[i].0 != Token::Close {
                    if toks[i].0 == Token::Comma {
                        i += 1;
                        continue;
                    }
                    let (inner, next) = use_tree(toks, i);
                    paths.extend(inner.into_iter().map(|p| prefix.iter().cloned().chain(p).collect()));
                    // Skip an alias (`as name`) or anything else up to the next item.
                    i = next;
                    while i < toks.len() && !matches!(toks[i].0, Token::Comma | Token::Close) {
                        i += 1;
                    }
                }
                return (paths, i + 1);
            }
            // `*`, `<` of generic arguments, or the end: the path so far.
            _ => return (vec![prefix], i),
        }
    }
}

/// `super` and `self` steps applied to `base`.
fn resolve(base: &[String], path: &[String]) -> Vec<String> {
    let mut out = base.to_vec();
    for segment in path {
        match segment.as_str() {
            "super" => {
                out.pop();
            }
            "self" => {}
            _ => out.push(segment.clone()),
        }
    }
    out
}

/// A source file with its module path and its text.
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    text: String,
}

fn source_files(root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap();
                let mut module: Vec<String> =
                    rel.parent().unwrap().components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                if !matches!(stem.as_str(), "mod" | "lib" | "main") {
                    module.push(stem);
                }
                let text = std::fs::read_to_string(&path).unwrap();
                files.push(SourceFile { path, module, text });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// The crate part a module belongs to: `core`, `analysis`, `report`, `doors`, `bin`.
fn area(module: &[String]) -> &str {
    module.first().map_or("lib", String::as_str)
}

/// The layer of src/core a module path lies in: its folder, or its top-level file.
fn core_unit(module: &[String]) -> Option<&str> {
    (area(module) == "core").then(|| module.get(1).map(String::as_str)).flatten()
}

/// One arrow with the first place that draws it.
type Edges = BTreeMap<(String, String), String>;

/// A cycle in the graph, as its units in order (the first again at the end).
fn find_cycle(edges: &Edges) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    // 0 unvisited, 1 on the current path, 2 done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    fn visit<'a>(
        unit: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        state.insert(unit, 1);
        path.push(unit);
        for &to in next.get(unit).into_iter().flatten() {
            match state.get(to).copied().unwrap_or(0) {
                1 => {
                    let from = path.iter().position(|&u| u == to).unwrap();
                    return Some(path[from..].iter().chain([&to]).map(|u| u.to_string()).collect());
                }
                0 => {
                    if let Some(cycle) = visit(to, next, state, path) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(unit, 2);
        None
    }
    let units: Vec<&str> = next.keys().copied().collect();
    for unit in units {
        if state.get(unit).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(unit, &next, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

/// What each area may reference besides itself; `None`: anything.
fn allowed(area: &str) -> Option<&'static [&'static str]> {
    match area {
        "core" => Some(&[]),
        "analysis" => Some(&["core"]),
        "report" => Some(&["analysis", "core"]),
        "doors" => Some(&["core"]),
        _ => None,
    }
}

/// The layering's breaches in the tree under `src`: one line each.
fn breaches(src: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut edges = Edges::new();
    let areas = ["analysis", "core", "doors", "report"];
    for file in source_files(src) {
        let in_library = area(&file.module) != "bin";
        let shown = file.path.strip_prefix(src.parent().unwrap()).unwrap().display().to_string();
        for reference in references(&file.text, &file.module, in_library) {
            let place = format!("{shown}:{}", reference.line);
            let target = &reference.segments;
            let (from, to) = (area(&file.module), area(target));
            if from != to && areas.contains(&to) {
                if let Some(ok) = allowed(from) {
                    if !ok.contains(&to) {
                        problems.push(format!("{place}: {from} must not use {to} ({})", target.join("::")));
                    }
                }
            }
            if let (Some(a), Some(b)) = (core_unit(&file.module), core_unit(target)) {
                if a != b {
                    edges.entry((a.to_string(), b.to_string())).or_insert(place);
                }
            }
        }
        if area(&file.module) == "report" && exits_the_process(&file.text) {
            problems.push(format!("{shown}: report must return values, not call std::process::exit"));
        }
        if area(&file.module) == "report" && prints(&file.text) {
            problems.push(format!("{shown}: report must return values, not print (hand notes to report::observer)"));
        }
    }

    if let Some(cycle) = find_cycle(&edges) {
        let arrows: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("  core::{} -> core::{} (first at {})", w[0], w[1], edges[&(w[0].clone(), w[1].clone())]))
            .collect();
        problems.push(format!("a cycle between the layers of src/core:\n{}", arrows.join("\n")));
    }
    problems
}

/// Writes to the terminal: `print!`/`eprint!` and their `ln` forms, or `stdout()`/`stderr()`.
fn prints(source: &str) -> bool {
    let toks = tokens(source);
    let is = |i: usize, word: &str| matches!(toks.get(i), Some((Token::Ident(w), _)) if w == word);
    (0..toks.len()).any(|i| {
        ["print", "println", "eprint", "eprintln", "dbg"].iter().any(|m| is(i, m))
            && matches!(toks.get(i + 1), Some((Token::Bang, _)))
            || ["stdout", "stderr"].iter().any(|f| is(i, f)) && matches!(toks.get(i + 1), Some((Token::Call, _)))
    })
}

/// `std::process::exit` in any spelling: the full path, `process::exit` after `use
/// std::process`, or `exit` taken from a `use std::process::{…}` tree.
fn exits_the_process(source: &str) -> bool {
    let toks = tokens(source);
    let is = |i: usize, word: &str| matches!(toks.get(i), Some((Token::Ident(w), _)) if w == word);
    (0..toks.len()).any(|i| {
        (is(i, "process") && toks.get(i + 1).is_some_and(|t| t.0 == Token::PathSep) && is(i + 2, "exit"))
            || (is(i, "std")
                && starts_path(&toks, i)
                && use_tree(&toks, i + 2).0.iter().any(|path| path.len() >= 2 && path[..2] == ["process", "exit"]))
    })
}

#[test]
fn the_crate_keeps_its_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = breaches(&src);
    assert!(problems.is_empty(), "layering broken:\n{}", problems.join("\n"));
}

// The checker itself, on small trees: it must see what it is there to see.

fn module(path: &str) -> Vec<String> {
    path.split('/').map(str::to_string).collect()
}

fn joined(source: &str, at: &str) -> Vec<String> {
    references(source, &module(at), true).into_iter().map(|r| r.segments.join("::")).collect()
}

#[test]
fn grouped_uses_and_plain_paths_are_read() {
    let source = r#"
        use crate::core::{record::clock::{self, now_ticks}, log::format as f};
        use stagefrontier::analysis::hang;
        fn f() { crate::core::net::verbs::write_notes(0); let s = "crate::core::steps"; }
        // crate::core::comms in a comment
        /* crate::core::kernels /* nested */ */
        const C: char = '{';
    "#;
    assert_eq!(
        joined(source, "core/runtime/collector"),
        [
            "core::record::clock",
            "core::record::clock::now_ticks",
            "core::log::format",
            "analysis::hang",
            "core::net::verbs::write_notes"
        ]
    );
}

#[test]
fn super_leaves_the_file_and_its_inline_modules() {
    let source = "use super::format;\nmod tests {\n    use super::super::records::kind;\n    use super::*;\n}\nuse super::super::live;";
    assert_eq!(
        joined(source, "core/log/records_net"),
        ["core::log::format", "core::log::records::kind", "core::log::records_net", "core::live"]
    );
}

#[test]
fn a_back_edge_is_a_cycle_and_a_wrong_direction_is_named() {
    let dir = std::env::temp_dir().join(format!("sf-layering-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("src/core/record/mod.rs", "pub mod ring;");
    write("src/core/record/ring.rs", "pub struct Ring;");
    write("src/core/log/mod.rs", "use crate::core::record::ring::Ring;");
    write("src/analysis/mod.rs", "use crate::core::log;");
    assert!(breaches(&dir.join("src")).is_empty());

    write("src/core/record/ring.rs", "use crate::core::{log::format, fnv};");
    write("src/analysis/mod.rs", "use crate::core::log;\nuse crate::doors::nccl;");
    write("src/report/ask.rs", "use std::process::{self, exit};\nfn f() { exit(2) }");
    write("src/report/say.rs", "fn f() { let _ = writeln!(std::io::stderr(), \"x\"); }");
    let problems = breaches(&dir.join("src"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("src/report/say.rs: report must return values, not print")));
    assert!(problems[0].contains("src/analysis/mod.rs:2: analysis must not use doors"), "{problems:#?}");
    assert!(problems[1].contains("src/report/ask.rs: report must return values"), "{problems:#?}");
    let cycle = problems.last().unwrap();
    assert!(cycle.contains("core::log -> core::record") && cycle.contains("core::record -> core::log"), "{cycle}");
}
