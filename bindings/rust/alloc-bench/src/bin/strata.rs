#[global_allocator]
static A: strata_alloc::Strata = strata_alloc::Strata;

fn main() {
    let s = alloc_bench::run("strata");
    // strata's own counts prove it served the run.
    let st = strata_alloc::stats();
    alloc_bench::report(&s, &format!(", \"strata_malloc_count\": {}", st.malloc_count));
}
