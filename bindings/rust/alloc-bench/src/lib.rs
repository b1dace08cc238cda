//! The lab's Rust workload: the same fixed work under whichever #[global_allocator] the binary
//! declares (src/bin/: strata, mimalloc, jemalloc).  Each of --threads workers does, per round:
//!   maps      a HashMap<String, Vec<u32>> and a BTreeMap<u64, String> built, updated and dropped
//!   trees     binary trees of boxed nodes (allocation-bound, as the benchmarks game's binary-trees)
//!   pipeline  batches of strings sent to the next worker over a channel and dropped there
//!             (frees on another thread than the allocating one)
//! Prints one JSON line: {"allocator", "threads", "rounds", "seconds", per-phase seconds,
//! "checksum"}.  The checksum depends on the work only, so every allocator must print the same.
//! Usage: rust-alloc-<allocator> [--threads N] [--rounds N] [--smoke] [--allocator NAME]
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

pub struct Summary {
    allocator: &'static str,
    threads: usize,
    rounds: usize,
    seconds: f64,
    phases: [f64; 3],
    checksum: u64,
}

struct Args {
    threads: usize,
    rounds: usize,
    scale: usize,
}

// Far past any machine the lab runs on; a request over it was thread::spawn's panic (exit 101).
const MAX_THREADS: usize = 4096;

fn args(allocator: &str) -> Args {
    let mut a = Args { threads: 2, rounds: 3, scale: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> String { it.next().unwrap_or_else(|| fail(&format!("{name} needs a value"))) };
        match arg.as_str() {
            "--threads" => a.threads = value("--threads").parse().unwrap_or_else(|_| fail("--threads: a number")),
            "--rounds" => a.rounds = value("--rounds").parse().unwrap_or_else(|_| fail("--rounds: a number")),
            "--smoke" => (a.rounds, a.scale) = (1, 0),
            // The lab names the variant it means to run: refuse to measure the wrong binary.
            "--allocator" => {
                let want = value("--allocator");
                if want != allocator {
                    fail(&format!("this binary's global allocator is {allocator}, not {want}"));
                }
            }
            other => fail(&format!("unknown argument {other}")),
        }
    }
    if a.threads == 0 || a.rounds == 0 {
        fail("--threads and --rounds must be at least 1");
    }
    if a.threads > MAX_THREADS {
        fail(&format!("--threads {}: at most {MAX_THREADS} (the pipeline starts two threads per worker)", a.threads));
    }
    a
}

fn fail(msg: &str) -> ! {
    eprintln!("alloc-bench: {msg}");
    std::process::exit(2)
}

// thread::spawn panics when the system refuses a thread (`--threads 100000000`: exit 101 and a
// backtrace hint); a refused thread is the run's error, said as such (exit 2).
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().spawn(f).unwrap_or_else(|e| fail(&format!("cannot start a thread: {e}")))
}

fn maps(seed: u64, n: usize) -> u64 {
    let mut words: HashMap<String, Vec<u32>> = HashMap::new();
    let mut tree: BTreeMap<u64, String> = BTreeMap::new();
    let mut x = seed | 1;
    for i in 0..n as u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        words.entry(format!("w{}", x % (n as u64 / 4 + 1))).or_default().push(i as u32);
        tree.insert(x % (n as u64 * 2), "v".repeat((x % 48) as usize));
        if i % 4 == 0 {
            tree.remove(&((x >> 3) % (n as u64 * 2)));
        }
    }
    words.values().map(|v| v.len() as u64).sum::<u64>() + tree.values().map(|s| s.len() as u64).sum::<u64>()
}

struct Node {
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

fn make(depth: u32) -> Box<Node> {
    if depth == 0 {
        Box::new(Node { left: None, right: None })
    } else {
        Box::new(Node { left: Some(make(depth - 1)), right: Some(make(depth - 1)) })
    }
}

fn count(n: &Node) -> u64 {
    1 + n.left.as_deref().map_or(0, count) + n.right.as_deref().map_or(0, count)
}

fn trees(max_depth: u32) -> u64 {
    let long_lived = make(max_depth);
    let mut sum = 0;
    for depth in (4..=max_depth).step_by(2) {
        for _ in 0..1u64 << (max_depth - depth) {
            sum += count(&make(depth));
        }
    }
    sum + count(&long_lived)
}

fn pipeline(threads: usize, batches: usize) -> u64 {
    // Worker t sends to worker (t + 1) % threads, which drops what it receives.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::sync_channel::<Vec<String>>(32)).unzip();
    let handles: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let tx = txs[(t + 1) % threads].clone();
            spawn(move || {
                let sender = spawn(move || {
                    for b in 0..batches {
                        tx.send((0..32).map(|j| format!("{t}:{b}:{j}:{}", "p".repeat(j * 3))).collect()).unwrap();
                    }
                });
                let got: u64 = rx.iter().take(batches).map(|b| b.iter().map(|s| s.len() as u64).sum::<u64>()).sum();
                sender.join().unwrap();
                got
            })
        })
        .collect();
    drop(txs);
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

pub fn run(allocator: &'static str) -> Summary {
    let a = args(allocator);
    let (map_n, depth, batches) = if a.scale == 0 { (2000, 10, 200) } else { (200_000, 18, 20_000) };
    let start = Instant::now();
    let mut phases = [0.0; 3];
    let mut checksum = 0u64;
    for _ in 0..a.rounds {
        let t0 = Instant::now();
        let handles: Vec<_> = (0..a.threads).map(|t| spawn(move || maps(t as u64 + 1, map_n))).collect();
        checksum += handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>();
        let t1 = Instant::now();
        let handles: Vec<_> = (0..a.threads).map(|_| spawn(move || trees(depth))).collect();
        checksum += handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>();
        let t2 = Instant::now();
        checksum += pipeline(a.threads, batches);
        let t3 = Instant::now();
        for (p, d) in phases.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2]) {
            *p += d.as_secs_f64();
        }
    }
    Summary { allocator, threads: a.threads, rounds: a.rounds, seconds: start.elapsed().as_secs_f64(), phases, checksum }
}

pub fn report(s: &Summary, extra: &str) {
    println!(
        "{{\"allocator\": \"{}\", \"threads\": {}, \"rounds\": {}, \"seconds\": {:.6}, \"maps_s\": {:.6}, \
         \"trees_s\": {:.6}, \"pipeline_s\": {:.6}, \"checksum\": {}{extra}}}",
        s.allocator, s.threads, s.rounds, s.seconds, s.phases[0], s.phases[1], s.phases[2], s.checksum
    );
}
