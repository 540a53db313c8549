//! Tells the conformance kit whether it is built optimized, so that stress and model tests
//! run at full size in optimized builds (release, ci) and at a smaller size in debug builds,
//! whatever the state of debug assertions.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(forest_optimized)");
    println!("cargo::rerun-if-env-changed=OPT_LEVEL");
    if std::env::var("OPT_LEVEL")
        .map(|level| level != "0")
        .unwrap_or(false)
    {
        println!("cargo::rustc-cfg=forest_optimized");
    }
}
