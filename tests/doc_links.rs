//! The repository's references to its own files stay true.
//!
//! - Every relative Markdown link in every `*.md` file (outside `target/`,
//!   `runs/` and `.git`) points to a file or directory the repository has,
//!   and a `#fragment` into a Markdown file names one of its headings (as
//!   GitHub makes their anchors).
//! - Every repository path cited in source, scripts and docs that starts
//!   with `docs/` and ends in `.md`, or starts with `tests/fixtures/`, or
//!   names a source file or script of a crate (`src/…`, `cli/…`,
//!   `interpose/…`, `testkit/…`, `examples/…`, `benches/…`, `scripts/…`
//!   ending in `.rs`, `.sh`, `.py` or `.c`), names a file or directory the
//!   repository has.
//!
//! A failure lists every broken reference with its file and line. Nothing
//! here uses the network: links with a scheme (`https:`, `mailto:`) are
//! left alone.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// Directories that are not the repository's own files.
const SKIP_DIRS: [&str; 3] = ["target", "runs", ".git"];

/// Files whose text is searched for cited paths: code, scripts, docs.
const CITING_EXTENSIONS: [&str; 7] = ["rs", "md", "sh", "py", "c", "toml", "txt"];

/// The repository: the workspace root (where `Cargo.lock` is) above this
/// test's package, wherever in the workspace the package lives.
fn root() -> PathBuf {
    let package = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    package
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&package)
        .to_path_buf()
}

/// Every file under `dir`, skipping [`SKIP_DIRS`] and other checkouts
/// nested inside (a directory with a `.git` of its own).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if SKIP_DIRS.contains(&name) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if path != root() && path.join(".git").exists() {
                continue;
            }
            files(&path, out);
        } else if meta.is_file() {
            out.push(path);
        }
    }
}

fn extension(path: &Path) -> &str {
    path.extension().and_then(|e| e.to_str()).unwrap_or("")
}

/// Whether `path`'s text is searched for cited paths: code, scripts and
/// docs, and the CI script; the fixtures' data is not (their READMEs are).
fn cites(rel: &Path) -> bool {
    let ext = extension(rel);
    if rel.starts_with("tests/fixtures") {
        return ext == "md";
    }
    rel.starts_with(".ci") || CITING_EXTENSIONS.contains(&ext)
}

/// A reference found in a file: where, and what it points to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    line: usize,
    target: String,
}

/// Lines of a Markdown text outside fenced code blocks, numbered from 1.
fn outside_fences(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let marker: String = line
            .trim_start()
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        let fenced = marker.len() >= 3 && marker.chars().all(|c| marker.starts_with(c));
        if fenced {
            match &fence {
                None => fence = Some(marker),
                Some(open) if marker.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
            }
        } else if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// [`outside_fences`] with inline code spans blanked out, so a bracket in
/// code is not taken for a link.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    outside_fences(text)
        .into_iter()
        .map(|(n, line)| (n, without_code_spans(line)))
        .collect()
}

/// `line` with each inline code span (`` `…` ``) replaced by spaces.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // the closing run of the same length, if any
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = chars[j..].iter().take_while(|c| **c == '`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.extend(std::iter::repeat_n(' ', j + run - i));
                i = j + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The targets of the Markdown links of `text`: inline links and images
/// (`[text](target "title")`) and reference definitions (`[id]: target`).
fn markdown_links(text: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    for (line, prose) in prose_lines(text) {
        let trimmed = prose.trim_start();
        if trimmed.starts_with('[')
            && let Some(end) = trimmed.find("]:")
        {
            let target = trimmed[end + 2..].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push(Reference {
                    line,
                    target: target.trim_matches(['<', '>']).to_string(),
                });
            }
            continue;
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(close) = after.find(')') else { break };
            let inside = after[..close].trim();
            let target = if let Some(angled) = inside.strip_prefix('<') {
                angled.split('>').next().unwrap_or("")
            } else {
                inside.split_whitespace().next().unwrap_or("")
            };
            if !target.is_empty() {
                out.push(Reference {
                    line,
                    target: target.to_string(),
                });
            }
            rest = &after[close..];
        }
    }
    out
}

/// Whether a link leaves the repository (`https:`, `mailto:`, …).
fn has_scheme(target: &str) -> bool {
    match target.find(':') {
        Some(i) => {
            let scheme = &target[..i];
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }
        None => false,
    }
}

/// `%20` and the like, decoded; anything malformed is kept as written.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) if bytes[i] == b'%' => {
                out.push(b);
                i += 3;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// The anchor GitHub gives a heading: lower case, every character that is
/// not a letter, a digit, `-`, `_` or a space dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor the headings of a Markdown text make, a repeated heading's
/// with `-1`, `-2`, … as GitHub numbers them.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in outside_fences(text) {
        let line = line.replace('`', "");
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// `path` with `.` and `..` resolved, or None when it climbs out of `root`.
fn inside_root(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => out = PathBuf::new(),
        }
    }
    Some(root.join(out))
}

/// Why the link `target`, written in the Markdown file `from`, is broken;
/// None when it holds.
fn broken_link(root: &Path, from: &Path, target: &str) -> Option<String> {
    if has_scheme(target) {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (target, None),
    };
    let path = percent_decoded(path);
    let file = if path.is_empty() {
        from.to_path_buf()
    } else {
        let joined = if let Some(from_root) = path.strip_prefix('/') {
            PathBuf::from(from_root)
        } else {
            from.strip_prefix(root)
                .ok()?
                .parent()
                .unwrap_or(Path::new(""))
                .join(&path)
        };
        match inside_root(root, &joined) {
            Some(f) => f,
            None => return Some("points outside the repository".into()),
        }
    };
    if !file.exists() {
        return Some("no such file".into());
    }
    match fragment {
        Some(f) if !f.is_empty() && extension(&file) == "md" => {
            let text = std::fs::read_to_string(&file).ok()?;
            let shown = file.strip_prefix(root).unwrap_or(&file).display();
            (!anchors(&text).contains(&percent_decoded(f).to_lowercase()))
                .then(|| format!("{shown} has no heading with the anchor #{f}"))
        }
        _ => None,
    }
}

/// Where cited paths begin. (Spelt once here, so that this file's own text
/// cites no path.)
const DOCS: &str = "docs/";
const FIXTURES: &str = "tests/fixtures/";
/// Where a crate's sources and scripts are, cited only as whole file names.
const SOURCES: [&str; 7] = [
    "src/",
    "cli/",
    "interpose/",
    "testkit/",
    "examples/",
    "benches/",
    "scripts/",
];
const SOURCE_EXTENSIONS: [&str; 4] = [".rs", ".sh", ".py", ".c"];

/// Characters a cited path is made of.
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./+-".contains(c)
}

/// The repository paths `text` cites: `docs/` paths to Markdown files,
/// `tests/fixtures/` paths and source files, each where a path begins (not
/// inside a longer one such as `interpose/tests/…`).
fn cited_paths(text: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // a Markdown reference definition is a link, checked as one
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') && trimmed.contains("]:") {
            continue;
        }
        for prefix in [DOCS, FIXTURES].into_iter().chain(SOURCES) {
            for (at, _) in line.match_indices(prefix) {
                let before = &line[..at];
                // inside a longer path, or a Markdown link's target
                if before.chars().next_back().is_some_and(path_char) || before.ends_with("](") {
                    continue;
                }
                let token: String = line[at..].chars().take_while(|c| path_char(*c)).collect();
                let token = token.trim_end_matches('.');
                if prefix == DOCS && !token.ends_with(".md") {
                    continue;
                }
                if SOURCES.contains(&prefix)
                    && !SOURCE_EXTENSIONS.iter().any(|e| token.ends_with(e))
                {
                    continue;
                }
                out.push(Reference {
                    line: i + 1,
                    target: token.to_string(),
                });
            }
        }
    }
    out
}

/// Crates of the workspace other than the root package: a file inside one
/// may cite paths relative to its crate (the `main.rs` of `cli/src` in `cli/Cargo.toml`).
const CRATES: [&str; 3] = ["cli", "interpose", "testkit"];

/// Whether `target`, cited by the file `rel`, exists: from the repository's
/// root, or from the crate `rel` belongs to.
fn cited_file_exists(root: &Path, rel: &Path, target: &str) -> bool {
    if root.join(target).exists() {
        return true;
    }
    let krate = rel.iter().next().and_then(|c| c.to_str());
    krate.is_some_and(|k| CRATES.contains(&k) && root.join(k).join(target).exists())
}

/// Every broken reference in the repository at `root`, as
/// `file:line: what`.
fn broken_references(root: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(root, &mut all);
    let mut broken = Vec::new();
    for file in &all {
        let rel = file.strip_prefix(root).unwrap_or(file);
        let is_md = extension(file) == "md";
        if !is_md && !cites(rel) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        if is_md {
            for r in markdown_links(&text) {
                if let Some(why) = broken_link(root, file, &r.target) {
                    broken.push(format!(
                        "{}:{}: link ({}): {why}",
                        rel.display(),
                        r.line,
                        r.target
                    ));
                }
            }
        }
        if cites(rel) {
            for r in cited_paths(&text) {
                if !cited_file_exists(root, rel, &r.target) {
                    broken.push(format!(
                        "{}:{}: cites {}, which the repository lacks",
                        rel.display(),
                        r.line,
                        r.target
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_reference_to_a_file_of_the_repository_holds() {
    let broken = broken_references(&root());
    assert!(
        broken.is_empty(),
        "{} broken reference(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_repository_is_actually_walked() {
    // a walk that found nothing would pass the test above vacuously
    let mut all = Vec::new();
    files(&root(), &mut all);
    let rel: Vec<PathBuf> = all
        .iter()
        .filter_map(|f| f.strip_prefix(root()).ok().map(Path::to_path_buf))
        .collect();
    for expected in ["README.md", "Cargo.toml", "src/lib.rs"] {
        assert!(
            rel.iter().any(|p| p == Path::new(expected)),
            "{expected} not found"
        );
    }
    assert!(
        !rel.iter().any(|p| p.starts_with("target")),
        "target/ was walked"
    );
}

/// A scratch repository with the given files, for the checks below.
fn scratch(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// `text` with `D/`, `F/`, `S/` and `C/` spelt out as [`DOCS`],
/// [`FIXTURES`], `src/` and `cli/`, so the tests below can write paths that
/// this file, itself checked, does not cite.
fn spelt(text: &str) -> String {
    text.replace("D/", DOCS)
        .replace("F/", FIXTURES)
        .replace("S/", SOURCES[0])
        .replace("C/", SOURCES[1])
}

#[test]
fn broken_links_are_named_with_file_and_line() {
    let repo = scratch(&[
        (
            "README.md",
            &spelt(
                "# Top\n\nSee [the guide](D/guide.md) and [gone](D/nothing.md).\n\
                 [anchor](#top) [bad anchor](#nowhere) [site](https://example.com)\n\
                 ```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)`\n\
                 [a dir](D/) [up](../outside.md)\n[ref]: D/missing.md\nsee S/gone.rs and S/lib.rs\n",
            ),
        ),
        (
            &spelt("D/guide.md"),
            "## The `first` part, again\n\n[back](../README.md#top) [x](../README.md#Top-2)\n\
             [y](#the-first-part-again)\n",
        ),
        (
            &spelt("S/lib.rs"),
            &spelt("//! cites D/guide.md and F/gone.log.\n"),
        ),
        (
            &spelt("S/main.rs"),
            &spelt("// cites F/ and D/nothing.md\n"),
        ),
        // a crate's manifest cites its own sources from the crate
        (
            &spelt("C/Cargo.toml"),
            &spelt("path = \"S/main.rs\" # and S/gone.rs\n"),
        ),
        (&spelt("C/S/main.rs"), ""),
    ]);
    let broken = broken_references(repo.path());
    let expected = [
        "README.md:3: link (D/nothing.md): no such file",
        "README.md:4: link (#nowhere): ",
        "README.md:9: link (../outside.md): points outside the repository",
        "README.md:10: link (D/missing.md): no such file",
        "README.md:11: cites S/gone.rs, which the repository lacks",
        "C/Cargo.toml:1: cites S/gone.rs, which the repository lacks",
        "D/guide.md:3: link (../README.md#Top-2): ",
        "S/lib.rs:1: cites F/gone.log, which the repository lacks",
        "S/main.rs:1: cites D/nothing.md, which the repository lacks",
        "S/main.rs:1: cites F/, which the repository lacks",
    ]
    .map(spelt);
    assert_eq!(broken.len(), expected.len(), "{broken:#?}");
    for (b, e) in broken.iter().zip(&expected) {
        assert!(b.starts_with(e.as_str()), "{b:?} should start with {e:?}");
    }
}

#[test]
fn cited_paths_start_where_a_path_starts() {
    let refs = cited_paths(&spelt(
        "a `D/x.md` b interpose/F/y c F/z/. D/dir/ D/y.md, \"F/w.log\" [l](D/l.md)",
    ));
    let targets: Vec<String> = refs.into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["D/x.md", "D/y.md", "F/z/", "F/w.log"].map(spelt));
}

#[test]
fn anchors_follow_github() {
    let a = anchors(
        "# §3 Argument checks, result codes\n## The checker (`librankwise_nccl.so`)\n\
         ## Faults, rankwise's checks off\n## Faults, rankwise's checks off\n\
         ```\n# not a heading\n```\n#nospace\n",
    );
    for expected in [
        "3-argument-checks-result-codes",
        "the-checker-librankwise_ncclso",
        "faults-rankwises-checks-off",
        "faults-rankwises-checks-off-1",
    ] {
        assert!(a.contains(expected), "{expected} not in {a:?}");
    }
    assert_eq!(a.len(), 4, "{a:?}");
}
