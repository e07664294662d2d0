//! The layout, checked from the source. No file of `src/` imports another that imports it
//! back, directly or around a longer loop: in `src/http/` none at all; elsewhere a
//! directory's `mod.rs` and its own files may name each other (the facade), nothing else.
//! In `src/http/`: no file is over 600 lines (a longer one holds more than one job: split it
//! where the jobs meet); the HTTP layer names no store and takes no lock. The line rule holds
//! for every file under `src/` too. Across the crate: the components (`scheduler`, `rundb`,
//! `accounts`, `nets`, `github`, `ledger`) depend on one another one way only, no top-level
//! module imports another that imports it back, and no component's state is visible outside
//! it. The workspace's other crates (`crates/*`, each its own module tree) keep the same
//! rules for their files (no import cycle but the facade, no file over 600 lines), and their
//! manifests keep the boundaries: the statistics and the protocol depend on no crate of the
//! workspace, the simulator on the protocol alone, never on the server.
//!
//! A module is a file (`mod.rs` stands for its directory). Module A depends on module B when
//! A's code outside its `#[cfg(test)]` part names B in a path: `crate::http::…`, `super::…`,
//! `self::…`, or a child's name (`kit::…` in `ui/mod.rs`); a path is charged to the longest
//! module it names, so `crate::http::state::AppState` is a dependency on `state.rs`, while
//! `crate::http::AppState` would be one on `http/mod.rs`; a `use` group, nested or not
//! (`crate::{a::{b::X, c}}`), is every path it holds. Declaring a child (`pub mod x;`)
//! is not a dependency; naming an item of one's parent is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/http/ui/kit/page.rs` → `[http, ui, kit, page]`; `…/mod.rs` → its directory.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("under src");
    let mut m: Module = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// The code a module's dependencies are read from: no test module, no comments, no
/// visibility paths (`pub(super)` names no module).
fn code(text: &str) -> String {
    regex::Regex::new(r"pub\((?:crate|super|self|in [^)]*)\)")
        .expect("regex")
        .replace_all(&plain(text), "pub")
        .into_owned()
}

/// A module's code as written, visibilities included: no test module, no comments.
fn plain(text: &str) -> String {
    // A test module declared here (`#[cfg(test)] mod tests;`) is not code of this module,
    // and an inline one (`#[cfg(test)] mod tests { … }`) ends it.
    let declared = regex::Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*;")
        .expect("regex");
    let text = declared.replace_all(text, "");
    let inline = regex::Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
        .expect("regex");
    let text = match inline.find(&text) {
        Some(m) => &text[..m.start()],
        None => &text[..],
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a `use` group's text (what is between its braces), each as its segments:
/// `a::{b, c::{d, self}}, e as f, *` → `a::b`, `a::c::d`, `a::c`, `e`, and nothing for `*`.
fn group_paths(group: &str) -> Vec<Vec<String>> {
    let mut items = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[from..]);
    let mut out = Vec::new();
    for item in items {
        let item = item.trim();
        let item = item.split(" as ").next().unwrap_or_default().trim();
        if item.is_empty() || item == "*" {
            continue;
        }
        if item == "self" {
            out.push(Vec::new());
            continue;
        }
        let (head, inner) = match item.find("::{") {
            Some(at) => (&item[..at], item[at + 3..].strip_suffix('}')),
            None => (item, None),
        };
        let head: Vec<String> = head
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(String::from)
            .collect();
        match inner {
            Some(inner) => {
                for tail in group_paths(inner) {
                    let mut p = head.clone();
                    p.extend(tail);
                    out.push(p);
                }
            }
            None => out.push(head),
        }
    }
    out
}

/// The text of the brace group opening at `open` (`text[open] == '{'`), without its braces.
fn braced(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    &text[open + 1..]
}

fn dependencies(modules: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let path = regex::Regex::new(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?")
        .expect("regex");
    let bare = regex::Regex::new(r"(?:^|[^:\w])([a-z_][a-z0-9_]*)::").expect("regex");
    let longest = |p: &[String]| {
        (1..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let mut deps = BTreeMap::new();
    for (m, text) in modules {
        let mut out = BTreeSet::new();
        for c in path.captures_iter(text) {
            let head: Vec<&str> = c[1]
                .split("::")
                .chain(c.get(2).map_or("", |g| g.as_str()).split("::"))
                .filter(|s| !s.is_empty())
                .collect();
            // A group, nested or not, is every path it holds (`self` is the head itself).
            let tails: Vec<Vec<String>> = match c.get(3) {
                Some(g) => group_paths(braced(text, g.end() - 1)),
                None => vec![Vec::new()],
            };
            for tail in tails {
                let mut parts: Vec<String> = head.iter().map(|s| s.to_string()).collect();
                parts.extend(tail);
                let resolved: Vec<String> = if parts[0] == "crate" {
                    parts[1..].to_vec()
                } else {
                    let mut at = m.clone();
                    let mut i = 0;
                    while i < parts.len() && (parts[i] == "super" || parts[i] == "self") {
                        if parts[i] == "super" {
                            at.pop();
                        }
                        i += 1;
                    }
                    at.extend(parts[i..].iter().cloned());
                    at
                };
                if let Some(to) = longest(&resolved)
                    && &to != m
                {
                    out.insert(to);
                }
            }
        }
        for c in bare.captures_iter(text) {
            let mut child = m.clone();
            child.push(c[1].to_string());
            if modules.contains_key(&child) {
                out.insert(child);
            }
        }
        deps.insert(m.clone(), out);
    }
    deps
}

/// A loop of dependencies, if there is one.
fn find_cycle(deps: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        deps: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        marks.insert(m.clone(), Mark::Open);
        stack.push(m.clone());
        for d in deps.get(m).into_iter().flatten() {
            match marks.get(d).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let at = stack.iter().position(|s| s == d).unwrap_or(0);
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(d.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(d, deps, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in deps.keys() {
        if marks.get(m).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(m, deps, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// The `src/` of every crate of the workspace but the server's (`crates/*/src`), by name.
fn member_sources() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&root)
        .expect("read crates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, p.join("src"))
        })
        .collect();
    out.sort();
    out
}

fn files_under(dir: &str) -> (PathBuf, Vec<PathBuf>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src.join(dir), &mut files);
    (src, files)
}

fn http_files() -> (PathBuf, Vec<PathBuf>) {
    files_under("http")
}

fn http_modules() -> BTreeMap<Module, String> {
    modules_of(http_files())
}

/// Every module of the crate but its roots (`lib.rs`, `main.rs`), with its code.
fn crate_modules() -> BTreeMap<Module, String> {
    crate_modules_as(code)
}

/// [`crate_modules`], each module's text made by `read` (`code` or `plain`).
fn crate_modules_as(read: fn(&str) -> String) -> BTreeMap<Module, String> {
    let (src, files) = files_under("");
    let mut modules = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        modules.insert(module_of(&src, &f), read(&text));
    }
    modules.retain(|m, _| {
        !matches!(m.as_slice(), [one] if one == "lib" || one == "main")
            // Test-only files (`foo/tests.rs`, the fixtures' `testkit.rs`) are not the crate.
            && !m.last().is_some_and(|l| l == "tests" || l == "testkit")
    });
    modules
}

/// The dependencies between top-level modules (`rundb/cache.rs` counts as `rundb`).
fn top_level(deps: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut top: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, ds) in deps {
        let from = m[..1].to_vec();
        let entry = top.entry(from.clone()).or_default();
        for d in ds {
            if d[..1] != from[..] {
                entry.insert(d[..1].to_vec());
            }
        }
    }
    top
}

fn modules_of((src, files): (PathBuf, Vec<PathBuf>)) -> BTreeMap<Module, String> {
    let mut code_of = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        code_of.insert(module_of(&src, &f), code(&text));
    }
    code_of
}

#[test]
fn no_import_cycle_in_http() {
    let modules = http_modules();
    assert!(
        modules.len() > 30,
        "src/http read: {} modules",
        modules.len()
    );
    let deps = dependencies(&modules);
    // The checker itself: the router names the UI, and a page names the kit.
    let m = |s: &str| s.split('/').map(String::from).collect::<Module>();
    assert!(deps[&m("http")].contains(&m("http/ui")));
    assert!(deps[&m("http/ui/run/page")].contains(&m("http/ui/kit")));
    if let Some(cycle) = find_cycle(&deps) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import cycle in src/http: {}", names.join(" -> "));
    }
}

#[test]
fn a_cycle_is_found() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Module>();
    let modules: BTreeMap<Module, String> = [
        (
            m("http"),
            "pub mod a; pub mod b; fn f() { a::x(); }".to_string(),
        ),
        (m("http/a"), "use crate::http::b::Y;".to_string()),
        (m("http/b"), "pub(super) fn g() { super::Z; }".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k, code(&v)))
    .collect();
    let deps = dependencies(&modules);
    let cycle = find_cycle(&deps).expect("http -> a -> b -> http");
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    let acyclic: BTreeMap<Module, String> = [
        (m("http"), "pub mod a; fn f() { a::x(); }".to_string()),
        (m("http/a"), "pub(super) fn x() {} // super::y".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k, code(&v)))
    .collect();
    assert_eq!(find_cycle(&dependencies(&acyclic)), None);
}

/// Every file of the crate, not only `src/http`: no module imports another that imports it
/// back, directly or around a longer loop. Outside `src/http` a directory's `mod.rs` and its
/// own files may name each other (the facade: the parent re-exports its children's items and
/// they name the parent's shared types); every other loop is refused.
#[test]
fn no_import_cycle_between_files_anywhere() {
    let modules = crate_modules();
    assert!(modules.len() > 100, "src read: {} modules", modules.len());
    let mut deps = dependencies(&modules);
    for (m, ds) in deps.iter_mut() {
        ds.retain(|d| !(d.starts_with(m) || m.starts_with(d)));
    }
    if let Some(cycle) = find_cycle(&deps) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import cycle in src: {}", names.join(" -> "));
    }
}

/// The same rule inside each crate of `crates/` (its `lib.rs` is its root module, as `mod.rs`
/// is a directory's: a root and its own files may name each other, nothing else loops).
#[test]
fn no_import_cycle_between_files_of_the_member_crates() {
    let members = member_sources();
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["shoal-protocol", "shoal-sim", "shoal-stats"] {
        assert!(names.contains(&want), "crates/{want} read: {names:?}");
    }
    for (name, src) in &members {
        let mut files = Vec::new();
        sources(src, &mut files);
        let mut modules = modules_of((src.clone(), files));
        // `lib.rs` is the crate root: the empty module path, as `crate::` names it.
        if let Some(root) = modules.remove(&vec!["lib".to_string()]) {
            modules.insert(Vec::new(), root);
        }
        modules.retain(|m, _| m.last().is_none_or(|l| l != "tests"));
        assert!(
            modules.len() >= 2,
            "crates/{name}/src read: {} modules",
            modules.len()
        );
        let mut deps = dependencies(&modules);
        for (m, ds) in deps.iter_mut() {
            ds.retain(|d| !(d.starts_with(m) || m.starts_with(d)));
        }
        if let Some(cycle) = find_cycle(&deps) {
            let names: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
            panic!("import cycle in crates/{name}/src: {}", names.join(" -> "));
        }
    }
}

/// The crate boundaries, from the manifests: the statistics are reusable by any testing
/// framework (no crate of this workspace under them), the protocol is what the server and its
/// clients share (nothing under it either), and the simulator is a client: it shares the
/// protocol with the server and depends on nothing else of it. The server depends on all three.
#[test]
fn member_crates_depend_on_no_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = |path: &Path| -> toml::Table {
        toml::from_str(&std::fs::read_to_string(path).expect("read a manifest")).expect("toml")
    };
    // The workspace's own crates a manifest names, under any dependency table.
    let ours = |m: &toml::Table| -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
            for (name, spec) in m
                .get(table)
                .and_then(|t| t.as_table())
                .into_iter()
                .flatten()
            {
                if name.starts_with("shoal") || spec.get("path").is_some() {
                    out.insert(name.clone());
                }
            }
        }
        out
    };
    let allowed: BTreeMap<&str, &[&str]> = [
        ("shoal-stats", &[][..]),
        ("shoal-protocol", &[][..]),
        ("shoal-sim", &["shoal-protocol"][..]),
    ]
    .into_iter()
    .collect();
    for (name, src) in member_sources() {
        let m = manifest(&src.with_file_name("Cargo.toml"));
        let Some(may) = allowed.get(name.as_str()) else {
            panic!("crates/{name}: a new crate; say here what it may depend on");
        };
        let named = ours(&m);
        let wrong: Vec<&String> = named
            .iter()
            .filter(|d| !may.contains(&d.as_str()))
            .collect();
        assert!(wrong.is_empty(), "crates/{name} depends on {wrong:?}");
        // Each says what it is: its crate docs open its root.
        let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
        assert!(
            lib.starts_with("//!"),
            "crates/{name}/src/lib.rs has no crate docs"
        );
    }
    let server = ours(&manifest(&root.join("Cargo.toml")));
    for name in allowed.keys() {
        assert!(
            server.contains(*name),
            "the server does not depend on {name}: {server:?}"
        );
    }
    // The checker itself: the simulator is seen naming the protocol.
    let sim = manifest(&root.join("crates/shoal-sim/Cargo.toml"));
    assert!(ours(&sim).contains("shoal-protocol"));
}

#[test]
fn nested_use_groups_are_read() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Module>();
    let modules: BTreeMap<Module, String> = [
        (m("a"), "pub mod b;".to_string()),
        (m("a/b"), "pub mod c; pub mod e;".to_string()),
        (m("a/b/c"), "use crate::d::Y;".to_string()),
        (m("a/b/e"), String::new()),
        (
            m("d"),
            "use crate::{a::{b::{c::X, self}}, a::b::e as f};\nfn g() {}".to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, code(&v)))
    .collect();
    let deps = dependencies(&modules);
    assert_eq!(
        deps[&m("d")],
        BTreeSet::from([m("a/b/c"), m("a/b"), m("a/b/e")]),
        "{deps:?}"
    );
    let cycle = find_cycle(&deps).expect("d -> a/b/c -> d");
    assert_eq!(cycle.len(), 3, "{cycle:?}");
}

#[test]
fn no_file_over_600_lines_in_http() {
    let (src, files) = http_files();
    let long: Vec<String> = files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).expect("read").lines().count()))
        .filter(|(_, n)| *n > 600)
        .map(|(f, n)| format!("{} ({n} lines)", module_of(&src, f).join("/")))
        .collect();
    assert!(long.is_empty(), "files over 600 lines: {long:?}");
}

/// The components, each over the ones it may name: the run core below the scheduler, the
/// accounts and the nets below the run core, the ledger below them all. A component never
/// names one above it or a sibling beside it, and none names the HTTP layer or `app`.
const COMPONENTS: &[(&str, &[&str])] = &[
    ("groups", &["scheduler", "rundb", "accounts", "ledger"]),
    ("scheduler", &["rundb", "accounts", "ledger"]),
    ("rundb", &["accounts", "nets", "ledger"]),
    ("accounts", &["ledger"]),
    ("nets", &["ledger"]),
    ("github", &["ledger"]),
    ("ledger", &[]),
];

#[test]
fn components_depend_one_way() {
    let deps = top_level(&dependencies(&crate_modules()));
    let m = |s: &str| vec![s.to_string()];
    // The checker itself: the HTTP layer names the run core, the run core the ledger.
    assert!(deps[&m("http")].contains(&m("rundb")), "{deps:?}");
    assert!(deps[&m("rundb")].contains(&m("ledger")), "{deps:?}");
    let names: BTreeSet<&str> = COMPONENTS.iter().map(|(c, _)| *c).collect();
    let mut wrong = Vec::new();
    for (component, below) in COMPONENTS {
        let Some(named) = deps.get(&m(component)) else {
            panic!("no module src/{component}");
        };
        for d in named {
            let d = d[0].as_str();
            let upward = names.contains(d) && !below.contains(&d);
            if upward || ["http", "app", "jobs", "sim"].contains(&d) {
                wrong.push(format!("{component} -> {d}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "components naming what they must not: {wrong:?}"
    );
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let deps = top_level(&dependencies(&crate_modules()));
    assert!(deps.len() > 15, "src read: {} modules", deps.len());
    if let Some(cycle) = find_cycle(&deps) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!(
            "import cycle between modules of src: {}",
            names.join(" -> ")
        );
    }
}

/// Each component's state is its own: the struct a component is (`Accounts`, `RunDb`, …) has
/// no field visible outside its module, so another component (or a handler) can only call it.
#[test]
fn no_component_state_is_visible_outside_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let field = regex::Regex::new(r"(?m)^\s+pub(\([^)]*\))? [a-z_][a-z0-9_]*\s*:").expect("regex");
    let mut seen = 0;
    let mut open = Vec::new();
    for (component, ty) in [
        ("groups", "Groups"),
        ("scheduler", "Scheduler"),
        ("rundb", "RunDb"),
        ("accounts", "Accounts"),
        ("nets", "Nets"),
        ("ledger", "Ledger"),
        ("github", "Github"),
    ] {
        let mut files = Vec::new();
        sources(&root.join(component), &mut files);
        for f in files {
            let text = code(&std::fs::read_to_string(&f).expect("read"));
            let Some(at) = text.find(&format!("pub struct {ty} {{")) else {
                continue;
            };
            seen += 1;
            let body = &text[at..];
            let body = &body[..body.find("\n}").unwrap_or(body.len())];
            for c in field.find_iter(body) {
                open.push(format!("{ty}: {}", c.as_str().trim()));
            }
        }
    }
    assert_eq!(seen, 7, "every component's struct found");
    assert!(
        open.is_empty(),
        "component fields visible outside it: {open:?}"
    );
}

/// The HTTP layer calls the components: it names no store (not even its value types: the
/// run model's `Date` is the run core's word) and takes no lock of its own.
#[test]
fn http_names_no_store_and_takes_no_lock() {
    let (src, files) = http_files();
    let store = regex::Regex::new(r"crate::store\b|\.store\(\)|state\.store\b").expect("regex");
    let lock = regex::Regex::new(
        r"parking_lot|\bMutex\b|\bRwLock\b|\.lock\(\)|\.try_lock\(\)|\.read\(\)|\.write\(\)",
    )
    .expect("regex");
    let mut found = Vec::new();
    for f in &files {
        let text = code(&std::fs::read_to_string(f).expect("read"));
        for (n, line) in text.lines().enumerate() {
            if store.is_match(line) || lock.is_match(line) {
                found.push(format!(
                    "{}:{}: {}",
                    module_of(&src, f).join("/"),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the HTTP layer names a store or takes a lock: {found:#?}"
    );
}

/// Every file of the server's `src/` and of each crate's (`crates/*/src`).
#[test]
fn no_file_over_600_lines_in_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    assert!(files.len() > 100, "src read: {} files", files.len());
    let before = files.len();
    for (_, src) in member_sources() {
        sources(&src, &mut files);
    }
    assert!(
        files.len() > before + 30,
        "crates/*/src read: {} files",
        files.len() - before
    );
    let long: Vec<String> = files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).expect("read").lines().count()))
        .filter(|(_, n)| *n > 600)
        .map(|(f, n)| {
            let rel = f.strip_prefix(root).expect("under the workspace");
            format!("{} ({n} lines)", rel.display())
        })
        .collect();
    assert!(long.is_empty(), "files over 600 lines: {long:?}");
}

/// The UI in rooms: `src/http/ui/<room>/` holds the pages of one thing a person does there
/// (`run`, `submit`, `dashboard`, `people`, `fleet`, `nets`, `lists`), built from the kit
/// (`ui/kit/`). A page never names a page of another room (what two rooms share goes to the
/// kit), and the kit names no room, so a new page touches its room and the kit only.
#[test]
fn no_page_imports_a_page_of_another_room() {
    let deps = dependencies(&http_modules());
    let room = |m: &Module| -> Option<String> {
        (m.len() >= 3 && m[0] == "http" && m[1] == "ui").then(|| m[2].clone())
    };
    let rooms: BTreeSet<String> = deps.keys().filter_map(room).collect();
    for r in [
        "run",
        "submit",
        "dashboard",
        "people",
        "fleet",
        "nets",
        "lists",
        "kit",
    ] {
        assert!(rooms.contains(r), "no room src/http/ui/{r}/: {rooms:?}");
    }
    // The checker itself: a run page names the kit and its room-mates.
    let m = |s: &str| s.split('/').map(String::from).collect::<Module>();
    assert!(deps[&m("http/ui/run/stats")].contains(&m("http/ui/run/charts")));
    let mut wrong = Vec::new();
    for (from, ds) in &deps {
        let Some(here) = room(from) else { continue };
        for d in ds {
            let Some(there) = room(d) else { continue };
            if there != here && there != "kit" {
                wrong.push(format!("{} -> {}", from.join("/"), d.join("/")));
            }
        }
    }
    assert!(wrong.is_empty(), "pages naming another room: {wrong:#?}");
}

/// The run core's verbs: the only `pub(crate)` items of `src/rundb` that code outside it may
/// name. What the scheduler keeps (`seam.rs`: the store, the ledger, the limits engine) and
/// what it does to runs (`verbs.rs`: a read-only scan of the candidate runs, read-only looks
/// at one run, a task added with the grant decision run under the run's lock, a task failed),
/// with the types they speak in. The cache, its entries (`RunEntry`), `commit`,
/// `set_inactive` and a run's counters are not among them.
const RUN_CORE_VERBS: &[&str] = &[
    "store",
    "ledger",
    "limits",
    "scan_cached",
    "Scanned",
    "arch_filter",
    "run_ref",
    "RunRef",
    "read_cached",
    "read_run",
    "add_task",
    "fail_task",
    "TaskEnd",
];

/// The `pub(crate)` items declared in the run core's modules (`rundb/…`), re-exports included.
fn run_core_crate_items(modules: &BTreeMap<Module, String>) -> BTreeSet<String> {
    let item = regex::Regex::new(
        r"pub\((?:crate|in crate[^)]*)\)\s+(?:(?:async|const|unsafe)\s+)*(?:fn|struct|enum|type|trait|const|static|mod)\s+([A-Za-z_]\w*)",
    )
    .expect("regex");
    let reexport =
        regex::Regex::new(r"pub\((?:crate|in crate[^)]*)\)\s+use\s+([^;]+);").expect("regex");
    let mut items = BTreeSet::new();
    for (_, text) in modules.iter().filter(|(m, _)| m[0] == "rundb") {
        items.extend(item.captures_iter(text).map(|c| c[1].to_string()));
        for c in reexport.captures_iter(text) {
            // `a::{b::C, D as E}` re-exports `C` and `E` (a piece ending in `::` is a prefix).
            for piece in c[1].split([',', '{', '}']).map(str::trim) {
                let name = match piece.split_once(" as ") {
                    Some((_, alias)) => alias.trim(),
                    None if piece.ends_with("::") => continue,
                    None => piece.rsplit("::").next().unwrap_or_default().trim(),
                };
                if !name.is_empty() && name != "self" && name != "*" {
                    items.insert(name.to_string());
                }
            }
        }
    }
    items
}

/// Where code outside the run core names one of its `pub(crate)` items that is not a verb:
/// `module: item`. A type is named by its word; a function or module by a call (`.name(`)
/// or a path through the run core (`crate::rundb::…::name`, a `use` group included).
fn run_core_items_named_outside(modules: &BTreeMap<Module, String>) -> Vec<String> {
    let items = run_core_crate_items(modules);
    let path =
        regex::Regex::new(r"\bcrate::rundb((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?").expect("regex");
    let mut found = Vec::new();
    for (m, text) in modules.iter().filter(|(m, _)| m[0] != "rundb") {
        // The last segment of every path through the run core.
        let mut through = BTreeSet::new();
        for c in path.captures_iter(text) {
            let head: Vec<String> = c[1]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            match c.get(2) {
                Some(g) => {
                    for tail in group_paths(braced(text, g.end() - 1)) {
                        through.extend(tail.last().or(head.last()).cloned());
                    }
                }
                None => through.extend(head.last().cloned()),
            }
        }
        for name in items
            .iter()
            .filter(|n| !RUN_CORE_VERBS.contains(&n.as_str()))
        {
            let named = if name.starts_with(char::is_uppercase) {
                regex::Regex::new(&format!(r"\b{name}\b"))
                    .expect("regex")
                    .is_match(text)
            } else {
                through.contains(name)
                    || regex::Regex::new(&format!(r"\.{name}\s*(?:::<[^>]*>\s*)?\("))
                        .expect("regex")
                        .is_match(text)
            };
            if named {
                found.push(format!("{}: {name}", m.join("/")));
            }
        }
    }
    found
}

/// Verbs, not locks: code outside the run core names none of its `pub(crate)` items but its
/// verbs ([`RUN_CORE_VERBS`]), so the scheduler reads and changes runs only through them.
#[test]
fn only_the_run_cores_verbs_are_used_outside_it() {
    let modules = crate_modules_as(plain);
    let items = run_core_crate_items(&modules);
    // The list is true: every verb is a `pub(crate)` item of the run core.
    let missing: Vec<&&str> = RUN_CORE_VERBS
        .iter()
        .filter(|v| !items.contains(**v))
        .collect();
    assert!(
        missing.is_empty(),
        "verbs not declared in src/rundb: {missing:?}"
    );
    // The checker itself: the scheduler's critical section adds its task through a verb.
    let assign = &modules[&vec!["scheduler".to_string(), "assign".to_string()]];
    assert!(
        assign.contains(".add_task("),
        "the scheduler's section read"
    );
    let found = run_core_items_named_outside(&modules);
    assert!(
        found.is_empty(),
        "run core items named outside src/rundb that are not its verbs: {found:?}"
    );
}

/// The checker finds a scheduler that takes a run's lock itself (`RunEntry`), journals a run
/// (`commit`) or names a non-verb in a `use` group, and passes the verbs.
#[test]
fn a_scheduler_reaching_into_the_run_core_is_found() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Module>();
    let modules: BTreeMap<Module, String> = [
        (
            m("rundb/cache"),
            "pub(crate) struct RunEntry { run: Mutex<Run> }\n\
             impl RunDb { pub(crate) fn commit(&self) {} pub(super) fn entry(&self) {} }",
        ),
        (
            m("rundb"),
            "mod cache; pub(crate) use cache::{Prio as Priority};\n\
             pub(crate) fn now() {}",
        ),
        (
            m("rundb/seam"),
            "impl RunDb { pub(crate) fn store(&self) {} }",
        ),
        (
            m("scheduler/assign"),
            "use crate::rundb::{DbResult, RunEntry, now};\n\
             fn f(r: &RunDb, e: &RunEntry) { r.store(); r.commit(); r.entry(); Priority::High; }",
        ),
        (
            m("scheduler/memory"),
            "fn g(r: &RunDb) { r.store().get(); }",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k, plain(v)))
    .collect();
    let items = run_core_crate_items(&modules);
    assert_eq!(
        items.iter().map(String::as_str).collect::<Vec<_>>(),
        ["Priority", "RunEntry", "commit", "now", "store"]
    );
    assert_eq!(
        run_core_items_named_outside(&modules),
        [
            "scheduler/assign: Priority",
            "scheduler/assign: RunEntry",
            "scheduler/assign: commit",
            "scheduler/assign: now",
        ]
    );
}
