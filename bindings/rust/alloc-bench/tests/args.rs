//! The benchmark's command line, run as the lab runs it.
use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rust-alloc-strata")).args(args).output().expect("the benchmark runs")
}

#[test]
fn more_threads_than_it_starts_is_a_clear_error() {
    // Before: thread::spawn's panic once the system refused a thread (exit 101, "failed to spawn
    // thread" and a backtrace hint), after starting tens of thousands of them.
    let out = run(&["--smoke", "--threads", "100000000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{:?} {err}", out.status);
    assert!(err.contains("alloc-bench: --threads 100000000: at most 4096"), "{err}");
}

#[test]
fn a_smoke_run_prints_its_summary() {
    let out = run(&["--smoke", "--threads", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("\"allocator\": \"strata\"") && line.contains("\"threads\": 2"), "{line}");
}
