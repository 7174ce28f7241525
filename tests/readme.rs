//! The README's Rust code is code that runs: every ```rust block of README.md is, line for line and in order,
//! in examples/readme.rs or examples/own_device.rs, which CI runs (scripts/test.sh) and which check what the
//! blocks' comments promise. No GPU needed here.

use std::path::Path;

/// A line with its runs of whitespace collapsed (rustfmt aligns trailing comments differently than the README).
fn normalized(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The ```rust blocks of `markdown`, each as its non-empty normalized lines.
fn rust_blocks(markdown: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```rust") => current = Some(Vec::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(block), l) if !l.is_empty() => block.push(normalized(l)),
            _ => {}
        }
    }
    assert!(current.is_none(), "a ```rust block is not closed");
    blocks
}

/// Whether `block`'s lines appear in `code`'s lines in order (other lines may come between them).
fn contains_in_order(code: &str, block: &[String]) -> bool {
    let mut lines = code.lines().map(normalized);
    block.iter().all(|wanted| lines.any(|l| l == *wanted))
}

#[test]
fn every_readme_rust_block_is_in_an_example_that_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples: Vec<(&str, String)> = ["examples/readme.rs", "examples/own_device.rs"]
        .into_iter()
        .map(|p| (p, std::fs::read_to_string(root.join(p)).unwrap()))
        .collect();
    let blocks = rust_blocks(&readme);
    assert!(blocks.len() >= 5, "README's ```rust blocks: {}", blocks.len());
    for block in &blocks {
        assert!(
            examples.iter().any(|(_, code)| contains_in_order(code, block)),
            "this README block is in neither example as written:\n{}",
            block.join("\n")
        );
    }
    // CI runs both examples.
    let test_script = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    for example in ["readme", "own_device"] {
        assert!(test_script.contains(&format!("--example {example}")), "scripts/test.sh does not run {example}");
    }
}
