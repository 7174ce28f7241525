//! Running the `convt` binary as a user runs it, and the assertions the CLI tests make about its output.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `convt` with `args`. RUST_BACKTRACE=1 so that a panic or an error carrying a backtrace would show it;
/// RUST_LOG unset so the tool's own default (warnings only) applies.
pub fn convt(args: &[&str]) -> Output {
    convt_with_env(args, &[], &[])
}

/// [`convt`] with the variables `set` set and those in `remove` removed from its environment.
pub fn convt_with_env(args: &[&str], set: &[(&str, &Path)], remove: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_convt"));
    cmd.args(args).env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    for (k, v) in set {
        cmd.env(k, v);
    }
    for k in remove {
        cmd.env_remove(k);
    }
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    cmd.output().expect("convt runs")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn describe(args: &[&str], out: &Output) -> String {
    format!(
        "convt {}\nexit: {:?}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Runs `convt` and asserts it succeeded.
#[track_caller]
pub fn convt_ok(args: &[&str]) -> Output {
    let out = convt(args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(args, &out));
    assert_no_panic(args, &out);
    out
}

#[track_caller]
pub fn assert_no_panic(args: &[&str], out: &Output) {
    let stderr = text(&out.stderr).to_lowercase();
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{}", describe(args, out));
}

/// Runs `convt` and asserts a clean failure: exit code 2, nothing on stdout, exactly one line on stderr that
/// starts with `error:` and contains each of `mentions`. Returns that line.
#[track_caller]
pub fn convt_fails(args: &[&str], mentions: &[&str]) -> String {
    let out = convt(args);
    let what = describe(args, &out);
    assert_eq!(out.status.code(), Some(2), "{what}");
    assert_no_panic(args, &out);
    assert!(out.stdout.is_empty(), "{what}");
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected exactly one line on stderr\n{what}");
    assert!(lines[0].starts_with("error:"), "{what}");
    for m in mentions {
        assert!(lines[0].contains(m), "stderr should mention {m:?}\n{what}");
    }
    lines[0].to_string()
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}
