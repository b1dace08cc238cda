#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    alloc_bench::report(&alloc_bench::run("jemalloc"), "");
}
