//! The library's floors, kept: every `crate::…` path in `src/` names a
//! module on the same floor or below, engines never reach into each
//! other, and the library links nothing that only the command line needs.
//!
//! Floors, bottom up (the layer list in `src/lib.rs` says what each owns):
//!
//! 0. `core`, `kernels`, `settings`, `machine`, `exit`
//! 1. `trace` (lines in NCCL's format, from `core` and `settings`)
//! 2. `transport` (bytes between ranks, nothing about NCCL)
//! 3. `agreement` (posts, rounds, verdicts, over the transports)
//! 4. `engine` (local, mpi, nccl; each engine its own room)
//! 5. `api` (the two faces of a communicator)
//! 6. `launch` (starts the ranks of an engine)
//! 7. `logs` (reads NCCL's and rankwise's logs)
//!
//! Comments are not imports: a module doc may name what sits above it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const FLOORS: &[(&str, u32)] = &[
    ("core", 0),
    ("kernels", 0),
    ("settings", 0),
    ("machine", 0),
    ("exit", 0),
    ("trace", 1),
    ("transport", 2),
    ("agreement", 3),
    ("engine", 4),
    ("api", 5),
    ("launch", 6),
    ("logs", 7),
];

/// Names exported at the crate root, and what they are re-exported from.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("Comm", "api"),
    ("NULL", "api"),
    ("P2POp", "api"),
    ("DataType", "core"),
    ("Element", "core"),
    ("Error", "core"),
    ("ErrorKind", "core"),
    ("Func", "core"),
    ("RedOp", "core"),
    ("Result", "core"),
    ("ResultCode", "core"),
    ("with_element_type", "core"),
    ("local", "launch"),
    ("mpi", "launch"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The room a file of `src/` belongs to: its top module, and for
/// `engine/<name>/…` the engine's own room.
fn room(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.as_slice() {
        [e, name, _, ..] if e == "engine" => format!("engine/{name}"),
        [top, ..] => top.clone(),
        [] => unreachable!(),
    }
}

/// The room a path `crate::a::b…` points into.
fn target(a: &str, b: Option<&str>) -> Option<String> {
    if a == "engine" {
        return Some(match b {
            Some(e @ ("local" | "mpi" | "nccl")) => format!("engine/{e}"),
            _ => "engine".into(),
        });
    }
    if let Some((_, module)) = ROOT_ITEMS.iter().find(|(item, _)| *item == a) {
        return Some(module.to_string());
    }
    FLOORS.iter().any(|(m, _)| *m == a).then(|| a.to_string())
}

fn floor(room: &str) -> Option<u32> {
    let top = room.split('/').next().unwrap();
    FLOORS.iter().find(|(m, _)| *m == top).map(|(_, f)| *f)
}

/// Code without its comments (line comments and doc comments).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // a `//` inside a string literal ("http://…") keeps the line
            Some(i) if l[..i].matches('"').count() % 2 == 0 => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every room → the rooms its code names through `crate::`.
fn edges(src: &Path) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_path_buf();
        if rel.components().count() == 1 && (rel == Path::new("lib.rs")) {
            continue; // the crate root re-exports every floor
        }
        let from = room(&rel);
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue; // `rankwise_crate::`, `$crate::`
            }
            let mut names = rest.split("::").map(|s| {
                s.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            });
            let a = names.next().unwrap_or_default();
            let b = names.next();
            let Some(to) = target(&a, b.as_deref()) else {
                continue;
            };
            if to != from && !from.starts_with(&format!("{to}/")) {
                out.entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .push(rel.display().to_string());
            }
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_room_of_the_library_has_a_floor() {
    let mut tops = BTreeSet::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        let name = name.trim_end_matches(".rs").to_string();
        if name != "lib" {
            tops.insert(name);
        }
    }
    let unplaced: Vec<_> = tops.iter().filter(|t| floor(t).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules with no floor in tests/layers.rs (and in src/lib.rs's layer list): {unplaced:?}"
    );
}

#[test]
fn no_room_reaches_above_its_floor_and_engines_keep_to_their_own() {
    let mut wrong = Vec::new();
    for (from, tos) in edges(&src()) {
        for (to, files) in tos {
            let (f, t) = (floor(&from).unwrap(), floor(&to).unwrap());
            let up = t > f;
            let sideways = from.starts_with("engine/") && to.starts_with("engine/");
            if up || sideways {
                wrong.push(format!(
                    "{from} (floor {f}) -> {to} (floor {t}) in {files:?}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_import() {
    // the scanner itself: a file of `core` naming `launch` is caught, a
    // comment naming it is not
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core");
    std::fs::create_dir_all(&core).unwrap();
    std::fs::write(
        core.join("a.rs"),
        "//! see crate::launch\nuse crate::launch::EngineKind;\n",
    )
    .unwrap();
    std::fs::write(core.join("b.rs"), "// crate::api::Comm\nfn f() {}\n").unwrap();
    let found = edges(dir.path());
    assert_eq!(
        found["core"].keys().collect::<Vec<_>>(),
        vec!["launch"],
        "{found:?}"
    );
    assert_eq!(found["core"]["launch"], vec!["core/a.rs".to_string()]);
}

#[test]
fn the_library_links_nothing_only_the_command_line_needs() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps: &str = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("Cargo.toml has [dependencies]");
    for cli_only in ["clap", "csv", "indicatif"] {
        assert!(
            !deps
                .lines()
                .any(|l| l.split('=').next().unwrap().trim() == cli_only),
            "the library depends on {cli_only}, which only the command line needs:\n{deps}"
        );
    }
}
