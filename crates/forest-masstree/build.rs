//! Sets `cfg(forest_optimized)` in optimized builds (release, ci), as forest-core's build
//! script does, so this crate's tests run at full size there and smaller in debug builds.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(forest_optimized)");
    // Set by RUSTFLAGS for memory tools (src/memcheck.rs), never by this script.
    println!("cargo::rustc-check-cfg=cfg(forest_memcheck)");
    println!("cargo::rerun-if-env-changed=OPT_LEVEL");
    if std::env::var("OPT_LEVEL")
        .map(|level| level != "0")
        .unwrap_or(false)
    {
        println!("cargo::rustc-cfg=forest_optimized");
    }
}
