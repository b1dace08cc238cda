//! Compiles libstrata's allocator — src/os and src/core, as src/CMakeLists.txt's strata_api
//! does — into a static library.  Only the strata_* names are defined: the process's malloc is
//! left alone, and Rust reaches strata through strata-alloc's GlobalAlloc.
//! The sources are this repository's (three levels up), or STRATA_SOURCE_DIR's.
use std::env;
use std::path::PathBuf;

fn main() {
    let root = match env::var_os("STRATA_SOURCE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../../.."),
    };
    println!("cargo:rerun-if-env-changed=STRATA_SOURCE_DIR");
    let mut build = cc::Build::new();
    build.cpp(true).cpp_link_stdlib(None); // the allocator needs no C++ runtime (as libstrata.so)
    for layer in ["src/os", "src/core"] {
        let dir = root.join(layer);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("strata sources not found in {}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            // os/dl.cpp (dlopen) serves the GPU layer only, as in src/CMakeLists.txt.
            .filter(|p| p.extension().map_or(false, |e| e == "cpp") && !p.ends_with("dl.cpp"))
            .collect();
        files.sort();
        build.files(files);
    }
    println!("cargo:rerun-if-changed={}", root.join("include/strata").display());
    build
        .include(root.join("include"))
        .include(root.join("src"))
        .std("c++20")
        .opt_level(3)
        .warnings(false)
        // src/CMakeLists.txt's STRATA_LIB_OPTIONS.
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .flag("-fno-threadsafe-statics")
        .flag("-ftls-model=initial-exec")
        .flag("-fvisibility=hidden")
        .flag("-fno-builtin-malloc")
        .flag("-fno-builtin-free")
        .flag("-fno-builtin-calloc")
        .flag("-fno-builtin-realloc")
        .compile("strata");
    println!("cargo:rustc-link-lib=pthread");
}
