#[global_allocator]
static A: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    alloc_bench::report(&alloc_bench::run("mimalloc"), "");
}
