//! strata as this test program's global allocator: collections and threads run on it, and
//! strata's statistics show that it served them (each test compares counts before and after;
//! tests run in parallel, so counts only ever grow by at least what a test made).
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::mpsc;
use std::thread;

use strata_alloc::{stats, usable_size, Strata};

#[global_allocator]
static A: Strata = Strata;

/// Runs f and returns how many allocations and frees strata counted meanwhile.
fn counted<R>(f: impl FnOnce() -> R) -> (R, u64, u64) {
    let before = stats();
    let r = f();
    let after = stats();
    (r, after.malloc_count - before.malloc_count, after.free_count - before.free_count)
}

#[test]
fn boxes_are_strata_blocks() {
    let (boxes, mallocs, _) = counted(|| (0..10_000usize).map(|i| vec![i as u8; 1 + i % 3000]).collect::<Vec<_>>());
    assert!(mallocs >= 10_000, "strata counted {mallocs} allocations for 10001");
    for (i, b) in boxes.iter().enumerate() {
        // A pointer strata did not return has no usable size.
        assert!(unsafe { usable_size(b.as_ptr()) } >= b.len(), "block {i} is not strata's");
        assert!(b.iter().all(|&x| x == i as u8));
    }
    let (_, _, frees) = counted(|| drop(boxes));
    assert!(frees >= 10_000, "strata counted {frees} frees for 10001");
}

#[test]
fn collections() {
    let ((), mallocs, _) = counted(|| {
        let mut map: HashMap<String, Vec<u64>> = HashMap::new();
        let mut tree = BTreeMap::new();
        let mut queue = VecDeque::new();
        for i in 0..50_000u64 {
            map.entry(format!("key-{}", i % 5000)).or_default().push(i);
            tree.insert(i, i.to_string());
            queue.push_back(vec![i; (i % 64) as usize]);
            if queue.len() > 1000 {
                queue.pop_front();
            }
            if i % 3 == 0 {
                tree.remove(&(i / 2));
            }
        }
        assert_eq!(map.len(), 5000);
        assert_eq!(map.values().map(Vec::len).sum::<usize>(), 50_000);
        let joined: String = tree.values().take(100).map(String::as_str).collect();
        assert!(!joined.is_empty());
    });
    assert!(mallocs >= 100_000, "strata counted only {mallocs} allocations");
}

#[test]
fn growth_shrink_and_zeroed() {
    // Vec growth is realloc; vec![0; n] is alloc_zeroed; sizes cross into huge mappings.
    let mut v: Vec<u64> = Vec::new();
    for i in 0..3_000_000u64 {
        v.push(i);
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v, (0..10).collect::<Vec<_>>());
    for n in [1usize, 100, 4096, 100_000, 10 << 20] {
        let z = vec![0u8; n];
        assert!(z.iter().all(|&b| b == 0));
        assert!(unsafe { usable_size(z.as_ptr()) } >= n);
        let mut d = vec![0xa5u8; n];
        d.resize(n * 2, 0);
        assert!(d[..n].iter().all(|&b| b == 0xa5) && d[n..].iter().all(|&b| b == 0));
    }
}

#[test]
fn large_alignments() {
    #[repr(align(64))]
    struct Line([u8; 64]);
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let lines: Vec<Box<Line>> = (0..1000).map(|i| Box::new(Line([i as u8; 64]))).collect();
    let pages: Vec<Box<Page>> = (0..64).map(|i| Box::new(Page([i as u8; 4096]))).collect();
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(&**l as *const Line as usize % 64, 0);
        assert_eq!(l.0[63], i as u8);
    }
    for p in &pages {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert!(unsafe { usable_size(&**p as *const Page) } >= 4096);
    }
    // Through std::alloc (the global allocator) at alignments to 1 MiB: zeroed, grown, freed.
    for align in [32usize, 256, 4096, 65536, 1 << 20] {
        let layout = std::alloc::Layout::from_size_align(3000, align).unwrap();
        unsafe {
            let p = std::alloc::alloc_zeroed(layout);
            assert!(!p.is_null() && p as usize % align == 0);
            assert!(std::slice::from_raw_parts(p, 3000).iter().all(|&b| b == 0));
            p.write_bytes(0x5a, 3000);
            let q = std::alloc::realloc(p, layout, 200_000);
            assert!(!q.is_null() && q as usize % align == 0, "realloc lost alignment {align}");
            assert!(std::slice::from_raw_parts(q, 3000).iter().all(|&b| b == 0x5a));
            std::alloc::dealloc(q, std::alloc::Layout::from_size_align(200_000, align).unwrap());
        }
    }
    // Aligned growth: a Vec of over-aligned elements reallocates through the aligned path.
    let mut grow: Vec<Line> = Vec::new();
    for i in 0..5000 {
        grow.push(Line([i as u8; 64]));
        assert_eq!(grow.as_ptr() as usize % 64, 0);
    }
    assert!(grow.iter().enumerate().all(|(i, l)| l.0[0] == i as u8));
    let zeroed: Vec<Page> = (0..8).map(|_| unsafe { std::mem::zeroed() }).collect();
    assert!(zeroed.iter().all(|p| p.0.iter().all(|&b| b == 0)));
}

#[test]
fn threads_with_cross_thread_frees() {
    let before = stats();
    // Producers allocate; the consumer frees what they made (remote frees in strata).
    let (tx, rx) = mpsc::sync_channel::<Vec<String>>(64);
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                for i in 0..2000 {
                    let batch: Vec<String> = (0..16).map(|j| format!("{t}-{i}-{j}-{}", "x".repeat(j * 7))).collect();
                    tx.send(batch).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumer = thread::spawn(move || rx.iter().map(|b| b.iter().map(String::len).sum::<usize>()).sum::<usize>());
    // Short-lived threads with heaps of their own, meanwhile.
    let workers: Vec<_> = (0..32)
        .map(|t| {
            thread::spawn(move || {
                let mut m = BTreeMap::new();
                for i in 0..2000u32 {
                    m.insert(i, vec![t as u8; (i % 200) as usize]);
                }
                m.values().map(Vec::len).sum::<usize>()
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let total = consumer.join().unwrap();
    let worked: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let expected: usize = (0..4)
        .map(|t: usize| (0..2000).map(|i: usize| (0..16).map(|j: usize| format!("{t}-{i}-{j}-").len() + j * 7).sum::<usize>()).sum::<usize>())
        .sum();
    assert_eq!(total, expected);
    assert_eq!(worked, 32 * (0..2000).map(|i| i % 200).sum::<usize>());
    let after = stats();
    assert!(after.malloc_count - before.malloc_count >= 4 * 2000 * 17 + 32 * 2000);
    assert!(after.remote_free_count > before.remote_free_count, "no cross-thread frees counted");
}

// An over-aligned block shrunk by realloc stayed where it was, whole: a Vec of 64-byte-aligned
// elements truncated to one and shrunk to fit kept its 64 MiB (a 4-byte alignment's block moves).
#[test]
fn shrinking_an_over_aligned_block_gives_its_memory_back() {
    #[repr(align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);
    for n in [100usize, 10_000, 1 << 20] {
        let mut v: Vec<Line> = (0..n).map(|i| Line([i as u8; 64])).collect();
        v.truncate(3);
        v.shrink_to_fit();
        assert_eq!(v.as_ptr() as usize % 64, 0);
        let kept = unsafe { usable_size(v.as_ptr()) };
        assert!(kept < 8 * 64, "{n} lines shrunk to 3 keep {kept} bytes");
        assert!(v.iter().enumerate().all(|(i, l)| l.0.iter().all(|&b| b == i as u8)));
    }
    for align in [32usize, 4096, 1 << 20] {
        let layout = std::alloc::Layout::from_size_align(8 << 20, align).unwrap();
        unsafe {
            let p = std::alloc::alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(0x3c, 8 << 20);
            let q = std::alloc::realloc(p, layout, 1000);
            assert!(!q.is_null() && q as usize % align == 0);
            assert!(usable_size(q) < (4 << 20), "align {align}: 1000 bytes keep {}", usable_size(q));
            assert!(std::slice::from_raw_parts(q, 1000).iter().all(|&b| b == 0x3c));
            // Growing within the block stays in place.
            let r = std::alloc::realloc(q, std::alloc::Layout::from_size_align(1000, align).unwrap(), 1001);
            assert!(usable_size(q) < 1001 || r == q);
            std::alloc::dealloc(r, std::alloc::Layout::from_size_align(1001, align).unwrap());
        }
    }
}

// usable_size answers for any pointer but one freed meanwhile.  A live block's address with bits
// set above the 47 that strata maps (bit 63 over a 48-byte block) passed for that block in
// strata's page map, and strata_usable_size read its canary at the non-canonical address: SIGSEGV.
#[test]
fn usable_size_of_addresses_past_47_bits_is_zero() {
    let blocks: Vec<Vec<u8>> = (1..=128).map(|i| vec![1u8; i * 16]).collect();
    for b in &blocks {
        let p = b.as_ptr() as usize;
        assert!(unsafe { usable_size(b.as_ptr()) } >= b.len());
        for high in [1usize << 47, 1 << 63, 0xffff_8000_0000_0000, 0x1234_5000_0000_0000] {
            let q = (p | high) as *const u8;
            assert_eq!(unsafe { usable_size(q) }, 0, "{q:?} ({p:#x} with {high:#x})");
        }
    }
}

#[test]
fn statistics_reader() {
    let s = stats();
    assert!(s.malloc_count > 0 && s.in_use_bytes > 0 && s.committed_bytes >= s.in_use_bytes);
    assert_eq!(s.bad_free_count, 0);
    let json = strata_alloc::stats_json();
    assert!(json.starts_with('{') && json.contains("\"malloc_count\""), "{json}");
    assert!(strata_alloc::options_json().contains("STRATA_PURGE_DELAY"));
    assert_eq!(strata_alloc::version(), "0.1.0");
    strata_alloc::collect(true);
}
